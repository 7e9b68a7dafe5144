"""The offline `local` provider: an extractive summarizer and a lexical drift detector.

It answers the same two questions as a real model, as the same JSON text, with no key
and no network, and the same answer every time (docs/contract.md, "LLM calls"). It reads
messages as data only: a message that asks for `include_in_memory: true` is dropped,
never obeyed.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shared.llm.accounting import account
from shared.llm.base import CallListener, Completion, DriftRequest, LLMCall, SummaryRequest, Usage
from shared.llm.local_drift import DEFAULT_DRIFT_THRESHOLDS, find_new_subject
from shared.llm.local_drift import DriftThresholds as DriftThresholds  # re-exported
from shared.llm.prompts import drift_messages, summary_messages
from shared.llm.telemetry import LOCAL, answered, model_call
from shared.llm.text import (
    STOPWORDS,
    clip,
    content_terms,
    is_content_word,
    salient_terms,
    split_sentences,
    tokens,
    weigh_terms,
)
from shared.llm.tokens import approx_tokens

LOCAL_MODEL = "local-extractive-v1"

# --- summarization ------------------------------------------------------------------

TITLE_MAX_WORDS = 4
TITLE_MAX_CHARS = 60
TITLE_MIN_SHARE = 0.3  # a title word is at least this salient relative to the top word
SUMMARY_MAX_CHARS = 300
MIN_SUBSTANTIVE_TERMS = 4  # fewer distinct content words than this is small talk
DUPLICATE_OVERLAP = 0.7  # notes often repeat a message; keep the first of the two

# The user states what matters; the assistant elaborates; tool output is mostly noise.
ROLE_WEIGHTS = {"user": 2.0, "assistant": 1.0, "tool": 0.25}
NOTES_WEIGHT = 1.5
PREVIOUS_SUMMARY_WEIGHT = 1.0

# Words that mark a decision or a preference. A strong cue is enough on its own; weak
# ones ("will", "use") also appear in chit-chat, so they need company.
_STRONG_CUES_TEXT = """
    decided decide decision agreed agree prefer prefers preferred preference always
    never must chose chosen choose deadline remember settled let's
"""
STRONG_CUES = frozenset(_STRONG_CUES_TEXT.split())
_WEAK_CUES_TEXT = """
    will should need needs use using plan planned planning don't dont won't want going
    i'll we'll you'll shall require required avoid
"""
WEAK_CUES = frozenset(_WEAK_CUES_TEXT.split())
_IMPERATIVE_TEXT = "use don't dont avoid keep make set put switch stick"
IMPERATIVE_STARTS = frozenset(_IMPERATIVE_TEXT.split())
CUE_PHRASES = ("from now on", "going forward", "make sure", "by default")
# A clause that opens with a common word reads better in lowercase after a semicolon.
_COMMON_OPENERS = STOPWORDS | STRONG_CUES | WEAK_CUES

# A sentence that addresses the summarizer rather than the conversation is an injection
# attempt: it is neither a decision nor a subject.
_INSTRUCTION = re.compile(
    r"include[_ ]in[_ ]memory|keep[_ ]?in[_ ]?memory|system prompt|you are now"
    r"|\b(ignore|disregard|override|forget)\b.{0,40}\b(instructions?|rules?|prompt|above)\b"
    r"|\b(respond|reply|answer|return|output)\b.{0,30}\bjson\b",
    re.IGNORECASE,
)
_FILLER_START = re.compile(
    r"^(?:(?:ok(?:ay)?|sure|great|so|alright|well|yes|yeah|cool|perfect|right|got it"
    r"|sounds good|thanks|thank you|hi|hello|hey|understood|noted)\b[,.!:;]?\s+)+",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _Sentence:
    position: int
    text: str
    terms: frozenset[str]
    strength: int  # 0: not a decision; 1: weak cues; 2: strong cue
    salience: float


def is_instruction(sentence: str) -> bool:
    """True when a sentence tries to steer the summarizer (never obeyed, never kept)."""
    return bool(_INSTRUCTION.search(sentence))


def decision_strength(sentence: str) -> int:
    """2 for a sentence with a strong decision cue, 1 for weak cues in company, else 0."""
    if sentence.rstrip().endswith("?") or is_instruction(sentence):
        return 0
    words = [t.lower() for t in tokens(sentence)]
    content = sum(1 for t in words if is_content_word(t))
    lowered = " ".join(words)
    strong = sum(1 for t in words if t in STRONG_CUES)
    strong += sum(1 for phrase in CUE_PHRASES if phrase in lowered)
    if strong and content >= 1:
        return 2
    weak = sum(1 for t in words if t in WEAK_CUES)
    imperative = bool(words) and words[0] in IMPERATIVE_STARTS
    return 1 if (weak >= 2 or imperative) and content >= 2 else 0


def _weighted_sources(request: SummaryRequest) -> list[tuple[str, float, bool]]:
    """(text, weight, may be quoted in the summary) for every part of the request."""
    sources: list[tuple[str, float, bool]] = []
    if request.omitted > 0 and request.previous_summary:
        sources.append((request.previous_summary, PREVIOUS_SUMMARY_WEIGHT, True))
    for line in request.lines:
        quotable = line.role in ("user", "assistant")
        sources.append((line.content, ROLE_WEIGHTS.get(line.role, 1.0), quotable))
    if request.notes:
        sources.append((request.notes, NOTES_WEIGHT, True))
    return sources


def _clean(sources: Sequence[tuple[str, float, bool]]) -> list[tuple[str, float, bool]]:
    """Every sentence of the sources, injection attempts removed."""
    return [
        (sentence, weight, quotable)
        for text, weight, quotable in sources
        for sentence in split_sentences(text)
        if not is_instruction(sentence)
    ]


def make_title(weighted_texts: Sequence[tuple[str, float]]) -> str:
    """2–4 salient words in order of appearance, first letter capitalized, ≤ 60 chars."""
    terms = salient_terms(weighted_texts)
    if not terms:
        return "Small talk"
    floor = terms[0].score * TITLE_MIN_SHARE
    chosen = [t for t in terms[:TITLE_MAX_WORDS] if t.score >= floor] or terms[:1]
    if len(chosen) < 2 and len(terms) > 1:
        chosen = terms[:2]
    while len(chosen) > 1 and len(" ".join(t.spelling for t in chosen)) > TITLE_MAX_CHARS:
        chosen = chosen[:-1]
    words = [t.spelling for t in sorted(chosen, key=lambda t: t.first_seen)]
    if len(words) == 1:
        words.append("chat")
    title = clip(" ".join(words), TITLE_MAX_CHARS)
    return title[0].upper() + title[1:]


def _tidy(sentence: str) -> str:
    """A sentence as a terse clause: filler opening and closing punctuation removed."""
    text = _FILLER_START.sub("", sentence).strip().rstrip(".!;:,")
    text = text or sentence.strip()
    words = tokens(text)
    first = words[0] if words else ""
    if first.lower() in _COMMON_OPENERS and first != "I":
        text = text[0].lower() + text[1:]
    return text


def _sentences(clean: Sequence[tuple[str, float, bool]]) -> list[_Sentence]:
    weights = weigh_terms((text, weight) for text, weight, _ in clean)
    result = []
    for position, (text, _, quotable) in enumerate(clean):
        terms = frozenset(content_terms(text))
        if not quotable or not terms:
            continue
        salience = sum(weights[t] for t in terms) / (1 + len(terms)) ** 0.5
        result.append(_Sentence(position, text, terms, decision_strength(text), salience))
    return result


def _overlaps(a: frozenset[str], b: frozenset[str]) -> bool:
    return len(a & b) / len(a | b) >= DUPLICATE_OVERLAP


def _select(sentences: Sequence[_Sentence], budget: int) -> list[_Sentence]:
    """Decisions first, then the most salient other sentence, as many as fit the budget."""
    decisions = sorted(
        (s for s in sentences if s.strength), key=lambda s: (-s.strength, -s.salience, s.position)
    )
    others = sorted(
        (s for s in sentences if not s.strength), key=lambda s: (-s.salience, s.position)
    )
    chosen: list[_Sentence] = []
    used = 0
    for sentence in decisions + others[:1]:
        if any(_overlaps(sentence.terms, c.terms) for c in chosen):
            continue
        cost = len(_tidy(sentence.text)) + 2
        if used + cost <= budget:
            chosen.append(sentence)
            used += cost
    if not chosen and (decisions or others):
        chosen = [(decisions or others)[0]]  # too long to fit whole: clipped when rendered
    return sorted(chosen, key=lambda s: s.position)


def summarize_locally(request: SummaryRequest) -> dict[str, object]:
    """The answer a careful model would give: title, terse summary, include_in_memory."""
    clean = _clean(_weighted_sources(request))
    title = make_title([(text, weight) for text, weight, _ in clean])
    sentences = _sentences(clean)
    chosen = _select(sentences, SUMMARY_MAX_CHARS)
    # The summary leads with the topic's own first sentence; the title is shown beside it
    # wherever summaries are read, so repeating it here would only cost tokens.
    body = "; ".join(_tidy(s.text) for s in chosen)
    summary = clip(body[0].upper() + body[1:] if body else title, SUMMARY_MAX_CHARS)
    if summary[-1] not in ".?…":
        summary += "."
    spoken = {term for text, _, quotable in clean if quotable for term in content_terms(text)}
    has_decision = any(s.strength for s in sentences)
    return {
        "title": title,
        "summary": summary,
        "include_in_memory": has_decision and len(spoken) >= MIN_SUBSTANTIVE_TERMS,
    }


# --- drift detection ----------------------------------------------------------------

NO_DRIFT: dict[str, object] = {"drift": False, "first_message_id": None, "new_title": None}


def detect_drift_locally(
    request: DriftRequest, limits: DriftThresholds = DEFAULT_DRIFT_THRESHOLDS
) -> dict[str, object]:
    """{drift, first_message_id, new_title}: the window's earliest clear new subject
    (shared.llm.local_drift), titled from its messages as a summary would be."""
    first = find_new_subject(request, limits)
    if first is None:
        return dict(NO_DRIFT)
    suffix = [
        (line.content, ROLE_WEIGHTS.get(line.role, 1.0))
        for line in request.window
        if line.id >= first.id and line.role != "tool"
    ]
    return {"drift": True, "first_message_id": first.id, "new_title": make_title(suffix)}


# --- the provider -------------------------------------------------------------------


def _completion(
    answer: dict[str, object],
    prompt: list[dict[str, str]],
    *,
    purpose: str,
    org_id: uuid.UUID | None,
    started: float,
    listener: CallListener | None,
) -> Completion:
    text = json.dumps(answer, sort_keys=True, ensure_ascii=False)
    # Usage as if the real prompt had been sent, so evaluations record comparable costs.
    prompt_tokens = sum(approx_tokens(message["content"]) for message in prompt)
    usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=approx_tokens(text))
    call = LLMCall(org_id=org_id, model=LOCAL_MODEL, purpose=purpose, failed=False, usage=usage)
    account(call, seconds=time.perf_counter() - started, listener=listener)
    return Completion(text=text, model=LOCAL_MODEL, usage=usage)


class LocalProvider:
    """The `LLM` protocol answered offline, deterministically, from the text alone."""

    model: str = LOCAL_MODEL

    def __init__(
        self,
        *,
        drift_thresholds: DriftThresholds = DEFAULT_DRIFT_THRESHOLDS,
        on_call: CallListener | None = None,
    ) -> None:
        """`on_call` is told of every call, as a real provider's (the usage ledger)."""
        self.drift_thresholds = drift_thresholds
        self.on_call = on_call

    def summarize(self, request: SummaryRequest) -> Completion:
        """Title, summary and include_in_memory, extracted from the topic's own sentences."""
        return self._answer(
            "summarize", request.org_id,
            lambda: summarize_locally(request), lambda: summary_messages(request),
        )  # fmt: skip

    def detect_drift(self, request: DriftRequest) -> Completion:
        """{drift, first_message_id, new_title} from discourse cues and word overlap."""
        return self._answer(
            "detect_drift", request.org_id,
            lambda: detect_drift_locally(request, self.drift_thresholds),
            lambda: drift_messages(request),
        )  # fmt: skip

    def _answer(
        self,
        purpose: str,
        org_id: uuid.UUID | None,
        answer: Callable[[], dict[str, object]],
        prompt: Callable[[], list[dict[str, str]]],
    ) -> Completion:
        """One call, traced as a real provider's (so a trace shows where a summary came
        from whichever provider made it) and counted as one."""
        with model_call(
            "chat", provider=LOCAL, model=LOCAL_MODEL, org_id=org_id, purpose=purpose
        ) as span:
            started = time.perf_counter()
            completion = _completion(
                answer(), prompt(), purpose=purpose, org_id=org_id, started=started,
                listener=self.on_call,
            )  # fmt: skip
            answered(span, usage=completion.usage, model=completion.model)
            return completion
