"""How a hybrid search merges its two rankings, words and meaning, into one list.

Pure: each side's candidates with their scores in, one list out. A candidate's own score
is WORDS_WEIGHT × the z-score of its words' score (its text alone) plus MEANING_WEIGHT ×
the z-score of its cosine similarity to the query, each z-score taken over all the
candidates of both sides, (x − mean) / stddev. Z-scores put the unbounded, idf-weighted
words' scores and the cosines (at most 1) on one scale per query. A candidate no word of
the query matches has a words' score of 0; one not embedded yet has a z-score of 0 for
its meaning (neither helped nor hurt: ranked by its words).

A message's fused score then adds NEIGHBOUR_WEIGHT × the own scores of the turns around
it (shared/search/ranking.py: NEIGHBOURS each side, the words' own rule), each taken on
the same scales: the answer to a question is often the turn after the one that says the
question's words, or means them. Fusing before adding keeps a neighbour below the
candidates' mean from helping (cosines are all positive, so adding raw ones lifted every
turn in the middle of a session).

Chosen on LoCoMo's dev split (bench/fusion_study.py, docs/benchmarks.md: the fusion
study and its second pass), with all-MiniLM-L6-v2 and 200 candidates a side: recall@10
0.785 with speakers' names in the text (0.777 without the neighbours' meaning, 0.754 for
the best reciprocal rank fusion, 0.714 for the words alone) and 0.696 without names
(0.638 without the neighbours' meaning, 0.677 the words alone). Since the z-scores are
over the candidates, the pool sizes are part of the formula (service.WORDS_POOL,
meaning.NEAREST).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from shared.search.ranking import NEIGHBOUR_WEIGHT

WORDS_WEIGHT = 0.4
MEANING_WEIGHT = 0.6

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Fused(Generic[Key]):
    key: Key
    score: float  # 0 for the weakest candidate: comparable within one answer only


@dataclass(frozen=True)
class Around:
    """A message's neighbours (ranking.NEIGHBOURS each side in its session): their own
    words' scores summed over all of them, their cosines over those that have a vector."""

    words: float
    turns: int
    meaning: float
    embedded: int


@dataclass(frozen=True)
class _Scale:
    """A side's mean and spread over the candidates; a spread of 0 says nothing."""

    mean: float
    spread: float

    @classmethod
    def of(cls, values: Sequence[float]) -> _Scale:
        if not values:
            return cls(0.0, 0.0)
        mean = math.fsum(values) / len(values)
        return cls(mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values)))

    def z(self, total: float, count: int = 1) -> float:
        """The sum of `count` values' z-scores, given their `total`."""
        return 0.0 if self.spread == 0 else (total - count * self.mean) / self.spread


def fuse(
    words: Mapping[Key, float],
    meaning: Mapping[Key, float | None],
    *,
    limit: int,
    around: Mapping[Key, Around] | None = None,
) -> list[Fused[Key]]:
    """Every candidate of either side, best first by the fused score (ties: the words'
    order, then the meaning's), at most `limit`. `words` maps a candidate to its own
    words' score, `meaning` to its cosine similarity (None: no vector), `around` a
    message to its neighbours' (none: a topic, or a fusion without neighbours)."""
    keys = list(words) + [key for key in meaning if key not in words]
    if not keys:
        return []
    by_words = _Scale.of([words.get(key, 0.0) for key in keys])
    cosines = [meaning.get(key) for key in keys]
    by_meaning = _Scale.of([cosine for cosine in cosines if cosine is not None])
    scores = []
    for key, cosine in zip(keys, cosines, strict=True):
        score = WORDS_WEIGHT * by_words.z(words.get(key, 0.0))
        if cosine is not None:
            score += MEANING_WEIGHT * by_meaning.z(cosine)
        turns = (around or {}).get(key)
        if turns is not None:
            score += NEIGHBOUR_WEIGHT * (
                WORDS_WEIGHT * by_words.z(turns.words, turns.turns)
                + MEANING_WEIGHT * by_meaning.z(turns.meaning, turns.embedded)
            )
        scores.append(score)
    floor = min(scores)
    ranked = sorted(range(len(keys)), key=lambda i: -scores[i])  # stable: the order above
    return [Fused(keys[i], scores[i] - floor) for i in ranked[:limit]]
