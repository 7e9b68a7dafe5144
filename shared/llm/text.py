"""Plain-text helpers for the offline provider: words, stems, sentences, salient terms.

Deliberately small and dependency-free: the `local` provider must run anywhere, give the
same answer every time, and be cheap enough to run on every evaluation.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import NamedTuple

# English function words plus chat filler: neither says what a conversation is about.
_STOPWORD_TEXT = """
    a about above after again against all almost already also although am among an and
    another any anybody anyone anything anyway are around as ask asked asking at away
    back be became because become been before being below best better between both but
    by came can cannot come could did do does doing done down during each either else
    enough even ever every everyone everything few find first for from further get gets
    getting give given go goes going gone got had has have having he her here hers
    herself him himself his how however i if in into is it its itself just keep know
    last least less let like likely made make many may maybe me might mine more most
    much must my myself need needs neither never next no nobody none nor not nothing now
    of off often oh ok okay on once one only or other others otherwise our ours
    ourselves out over own per perhaps please probably put quite rather really right
    said same say says see seem seems shall she should since so some somebody someone
    something sometimes soon still such sure take than that the their theirs them
    themselves then there these they thing things think this those though through thus
    to together too took toward try under until up upon us use used uses using very via
    want wants was way we well went were what whatever when where whether which while
    who whom whose why will with within without would yes yet you your yours yourself
    yourselves hi hello hey thanks thank thx cheers bye goodbye welcome great cool nice
    good fine awesome perfect alright yeah yep yup nope lol haha hmm ah wow sounds sound
    glad happy lot lots kind sort bit actually basically definitely totally pretty also
    etc decide decided decision agree agreed prefer prefers preferred chose choose
    chosen always tell told help question answer today tomorrow yesterday day days time
    hear heard mean means meant feel guess suppose hope wonder wondering stuff
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_'’.+#-]*[A-Za-z0-9+#])?")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_DOUBLED = re.compile(r"([b-df-hj-kmnp-rtv-y])\1$")  # not l, s, z: call, pass, buzz


def _stopword_stems() -> frozenset[str]:
    return frozenset(stem(word) for word in STOPWORDS)


def tokens(text: str) -> list[str]:
    """Word tokens in their original spelling (keeps `don't`, `gpt-4o`, `c++`)."""
    return [t.replace("’", "'") for t in _TOKEN.findall(text)]


# Both word-level helpers are pure and hot (every evaluation re-reads its topic's words):
# a bounded cache makes re-reading a word a dictionary look-up.
_WORD_CACHE = 1 << 16


@lru_cache(maxsize=_WORD_CACHE)
def stem(word: str) -> str:
    """A light, deterministic suffix stripper so `plans`, `planned` and `planning` meet."""
    w = word.lower()
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif w.endswith(("sses", "xes", "ches", "shes")):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed") and not w.endswith("eed"):
        w = w[:-2]
    else:
        return w[:-1] if len(w) > 3 and w.endswith("e") and not w.endswith("ee") else w
    return w[:-1] if _DOUBLED.search(w) else w


@lru_cache(maxsize=_WORD_CACHE)
def is_content_word(word: str) -> bool:
    """True for a word that can say what a text is about."""
    w = word.lower()
    if "'" in w and not w.endswith("'s"):
        return False  # contractions (don't, we'll) are function words
    w = w.removesuffix("'s")
    if w in STOPWORDS or len(w) < 2 or stem(w) in STOPWORD_STEMS:
        return False  # the stem catches inflections: gives, helped, things
    if w.isdigit():
        return len(w) == 4  # a year is worth keeping; other bare numbers are noise
    return len(w) >= 3 or any(c.isdigit() for c in w)


def content_terms(text: str) -> list[str]:
    """Stems of the content words of `text`, in order."""
    return [stem(t) for t in tokens(text) if is_content_word(t)]


def weigh_terms(weighted_texts: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Weighted term frequencies of the texts' content words."""
    weights: dict[str, float] = {}
    for text, weight in weighted_texts:
        for term in content_terms(text):
            weights[term] = weights.get(term, 0.0) + weight
    return weights


STOPWORD_STEMS = _stopword_stems()


def cosine(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Cosine similarity of two term-weight vectors; 0.0 when either is empty."""
    if not a or not b:
        return 0.0
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    dot = sum(weight * large.get(term, 0.0) for term, weight in small.items())
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`, split at line breaks and at . ! ? followed by a space."""
    sentences: list[str] = []
    for line in text.splitlines():
        for part in _SENTENCE_END.split(line.strip()):
            part = " ".join(part.split()).strip(" -*•")
            if part:
                sentences.append(part)
    return sentences


class Term(NamedTuple):
    """A content word: its most natural spelling, weighted frequency, first position."""

    spelling: str
    score: float
    first_seen: int


def salient_terms(weighted_texts: Iterable[tuple[str, float]]) -> list[Term]:
    """Every content word of the texts, most salient first.

    Salience is weighted frequency; ties go to the word seen first, so the answer is
    deterministic. A word's spelling is its most common one, where a sentence's first
    word counts as lowercase unless it looks like an acronym or a name (`API`, `PostgreSQL`).
    """
    score: dict[str, float] = {}
    first_seen: dict[str, int] = {}
    spellings: dict[str, Counter[str]] = {}
    for text, weight in weighted_texts:
        for sentence in split_sentences(text):
            for index, token in enumerate(tokens(sentence)):
                if not is_content_word(token):
                    continue
                key = stem(token)
                score[key] = score.get(key, 0.0) + weight
                first_seen.setdefault(key, len(first_seen))
                spelling = token.removesuffix("'s")
                if index == 0 and spelling[1:].islower():
                    spelling = spelling.lower()
                spellings.setdefault(key, Counter())[spelling] += 1
    terms = [Term(_spelling(spellings[k]), score[k], first_seen[k]) for k in score]
    return sorted(terms, key=lambda term: (-term.score, term.first_seen))


def _spelling(forms: Counter[str]) -> str:
    # most common first; among equals, the one with capitals (an acronym or a name)
    return sorted(forms.items(), key=lambda item: (-item[1], item[0].islower(), item[0]))[0][0]


def clip(text: str, limit: int) -> str:
    """`text` cut at a word boundary to at most `limit` characters, marked with `…`."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0] or text[: limit - 1]
    return cut.rstrip(" ,;:") + "…"
