"""Offline drift detection: where, among a topic's newest messages, a new subject begins.

Deterministic, standard library only, and cheap enough to run after every message. It
combines the two kinds of evidence people use to see a conversation move on:

- discourse cues: a change announced as such ("by the way"), a greeting, a sign-off
  just before ("anything else?"), or a question on words the last messages never used,
  asked by someone who was not answering a question or a request;
- word overlap (TextTiling-like), for a user's message only (an assistant follows the
  user's lead, and asks when it changes the subject): the block of messages after a
  candidate boundary holds together but shares (TF-IDF-weighted) words with the block
  before it hardly at all.

Either kind needs the new subject to persist for a few messages, and a cue is only
trusted when the words that follow it are also new to the topic. Short back-channel
messages ("ok", "thanks!", "yes") carry no content words: they neither start a subject
nor count towards its persistence.

Tuned on the dev splits of DialSeg711 and TIAGE (`bench/drift_quality.py`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from shared.llm.base import DriftRequest, TranscriptLine
from shared.llm.text import content_terms, cosine, split_sentences


@dataclass(frozen=True)
class DriftThresholds:
    """The knobs of drift detection; similarities are cosines of TF-IDF vectors.

    A persistence is how many informative messages the new subject must already have,
    its first included, before it is trusted: the stronger the cue, the fewer.
    """

    block: int = 3  # messages on each side of a candidate boundary that are compared
    explicit_persistence: int = 2  # announced, greeted, or right after a sign-off
    question_persistence: int = 3  # opened by a question on words not just used
    lexical_persistence: int = 3  # on word evidence alone
    min_topic_messages: int = 2  # informative messages before a boundary on words alone
    max_cue_similarity: float = 0.10  # a cued new subject's block vs the topic so far
    max_block_similarity: float = 0.05  # block after vs block before, on words alone
    topic_context: int = 10  # messages before a cue that stand for "the topic so far"
    question_context: int = 2  # messages whose words make a question a follow-up
    idf_smoothing: float = 1.0  # added to both counts: a few dozen messages are few


DEFAULT_DRIFT_THRESHOLDS = DriftThresholds()
MIN_COMPOUND_PART = 4  # shorter word ends ("art" in "start") are coincidences

# People often say they change the subject; word overlap alone cannot tell a new subject
# from a new sub-question in two messages, an announcement can.
_SHIFT = re.compile(
    r"\b(by the way|btw|different (question|topic|subject)|unrelated|new (question|topic)"
    r"|another (question|topic|thing)|switching (gears|topics?)|change of (subject|topic)"
    r"|changing the (subject|topic)|on (another|a different|an unrelated) (note|topic|subject)"
    r"|moving on|(ask|talk about) something else)\b",
    re.IGNORECASE,
)
_GREETING = re.compile(r"^\W*(hi|hello|hey|good (morning|afternoon|evening))\b", re.IGNORECASE)
# A sign-off closes a line of work: what the other side says next is likely new.
_CLOSING = re.compile(
    r"\b(anything else|any other (requests?|questions?|things?)|what else can i"
    r"|in any other way|something else i can)\b",
    re.IGNORECASE,
)
# A question right after a request is a clarification of it ("which day?"), not a shift.
_REQUEST = re.compile(
    r"\b(i need|i want|i'd like|i would like|i'm looking for|i am looking for|looking for"
    r"|can you|could you|can i get|please|help me|find me|tell me|give me|show me)\b",
    re.IGNORECASE,
)


def announces_shift(text: str) -> bool:
    """True when a message says it changes the subject ("by the way", "unrelated: …")."""
    return bool(_SHIFT.search(text))


@dataclass(frozen=True)
class _Reading:
    """What drift detection needs to know about one message's text."""

    terms: tuple[str, ...]  # content-word stems, in order; empty for a back-channel
    question_terms: frozenset[str]  # the stems of its questions
    ends_with_question: bool
    announces: bool
    greets: bool
    closes: bool
    requests: bool


@lru_cache(maxsize=1024)
def _read(text: str) -> _Reading:
    # Cached: every evaluation re-reads the topic's recent messages.
    sentences = split_sentences(text)
    questions = [s for s in sentences if s.endswith("?")]
    return _Reading(
        terms=tuple(content_terms(text)),
        question_terms=frozenset(t for q in questions for t in content_terms(q)),
        ends_with_question=bool(sentences) and sentences[-1].endswith("?"),
        announces=announces_shift(text),
        greets=bool(_GREETING.search(text)),
        closes=bool(_CLOSING.search(text)),
        requests=bool(_REQUEST.search(text)),
    )


@dataclass(frozen=True)
class _Message:
    line: TranscriptLine
    reading: _Reading
    in_window: bool


Vector = dict[str, float]


def _idf(messages: Sequence[_Message], smoothing: float) -> Vector:
    """Inverse document frequencies from the topic's own messages, smoothed.

    A word most messages use says little about where one subject ends; with only a
    few dozen messages, the smoothing keeps one occurrence from weighing too much.
    """
    counts: dict[str, int] = {}
    for message in messages:
        for term in set(message.reading.terms):
            counts[term] = counts.get(term, 0) + 1
    total = len(messages) + smoothing
    return {term: math.log(1 + total / (n + smoothing)) for term, n in counts.items()}


def _vector(terms: Iterable[str], idf: Vector) -> Vector:
    vector: Vector = {}
    for term in terms:
        vector[term] = vector.get(term, 0.0) + idf.get(term, 1.0)
    return vector


def _block(messages: Sequence[_Message], idf: Vector) -> Vector:
    return _vector((t for m in messages for t in m.reading.terms), idf)


def _informative(messages: Iterable[_Message]) -> int:
    return sum(1 for m in messages if m.reading.terms)


class Cue(IntEnum):
    """What says, by a message's form or its neighbour's, that a new subject opens."""

    QUESTION = 1  # a question on words the last messages did not use
    EXPLICIT = 2  # announced ("by the way"), a greeting, or right after a sign-off


def _cue(messages: Sequence[_Message], j: int, limits: DriftThresholds) -> Cue | None:
    this, before = messages[j].reading, messages[j - 1].reading
    if this.announces:
        return Cue.EXPLICIT
    if this.closes:
        return None  # a sign-off ends a subject, it does not start one
    if (this.greets and not before.greets) or before.closes:
        return Cue.EXPLICIT
    if not this.question_terms or before.requests:
        return None
    if before.ends_with_question or before.question_terms:
        return None  # it answers a question (perhaps asking one back)
    recent = {t for m in messages[max(0, j - limits.question_context) : j] for t in m.reading.terms}
    if any(_related(term, recent) for term in this.question_terms):
        return None  # a follow-up: it asks about what was just said
    return Cue.QUESTION


def _related(term: str, others: set[str]) -> bool:
    """`term` is one of `others`, or one half of a compound of them ("dough", "sourdough")."""
    if term in others:
        return True
    if len(term) < MIN_COMPOUND_PART:
        return False
    return any(
        len(other) >= MIN_COMPOUND_PART and (other.endswith(term) or term.endswith(other))
        for other in others
    )


def _persists(messages: Sequence[_Message], j: int, needed: int, limits: DriftThresholds) -> bool:
    """Has the subject opened at j lasted `needed` informative messages, its first
    included, before another subject was explicitly opened?"""
    seen = 0
    for k in range(j, len(messages)):
        if not messages[k].reading.terms:
            continue  # back-channels neither count nor interrupt
        if k > j and _cue(messages, k, limits) is Cue.EXPLICIT:
            return False
        seen += 1
        if seen >= needed:
            return True
    return False


def _starts_subject(
    messages: Sequence[_Message], j: int, idf: Vector, limits: DriftThresholds
) -> bool:
    """Is message j (not the first) the first message of a new subject?"""
    this = messages[j]
    if not this.reading.terms:
        return False  # a back-channel neither starts nor carries a subject
    after = messages[j : j + limits.block]
    cue = _cue(messages, j, limits)
    if cue is not None:
        needed = limits.explicit_persistence if cue is Cue.EXPLICIT else limits.question_persistence
        if not _persists(messages, j, needed, limits):
            return False
        # The cue is only trusted if the words that follow it are new to the topic too.
        topic = _block(messages[max(0, j - limits.topic_context) : j], idf)
        return cosine(topic, _block(after, idf)) <= limits.max_cue_similarity
    # On words alone: only the user moves the conversation on without saying so (the
    # assistant follows; when it changes the subject it asks, which is a cue), and a
    # reply to a question belongs to the question's subject.
    if this.line.role != "user" or messages[j - 1].reading.ends_with_question:
        return False
    if not _persists(messages, j, limits.lexical_persistence, limits):
        return False
    if _informative(messages[:j]) < limits.min_topic_messages:
        return False
    before_messages = messages[max(0, j - limits.block) : j]
    before = _block(before_messages, idf)
    if cosine(before, _block(after, idf)) > limits.max_block_similarity:
        return False
    seen = {t for m in before_messages for t in m.reading.terms}
    if any(_related(t, seen) for t in this.reading.terms):
        return False  # its first message picks up a word of the subject it would leave
    # The new subject holds together: its first message shares a word with what follows.
    following = {t for m in after[1:] for t in m.reading.terms}
    return any(_related(t, following) for t in this.reading.terms)


def find_new_subject(
    request: DriftRequest, limits: DriftThresholds = DEFAULT_DRIFT_THRESHOLDS
) -> TranscriptLine | None:
    """The first message of the window's earliest new subject, or None for no drift.

    The earliest, because one evaluation makes at most one fork: a later change of
    subject stays in the new topic, where the next evaluation can still find it.
    Tool messages are neither read nor candidates.
    """
    window_ids = {line.id for line in request.window}
    messages = [
        _Message(line, _read(line.content), line.id in window_ids)
        for line in (*request.earlier, *request.window)
        if line.role != "tool"
    ]
    # The topic's title and summary are not read: they are refreshed from the whole
    # topic, window included, so they would count a new subject as the topic's own.
    idf = _idf(messages, limits.idf_smoothing)
    for j in range(1, len(messages)):  # the topic's first message cannot leave it
        if messages[j].in_window and _starts_subject(messages, j, idf, limits):
            return messages[j].line
    return None
