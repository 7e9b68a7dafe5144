"""How a hybrid search merges its two rankings, words and meaning, into one list.

Pure: each side's candidates with their scores in, one list out. A candidate's fused
score is WORDS_WEIGHT × the z-score of its words' score plus MEANING_WEIGHT × the z-score
of its cosine similarity to the query, each z-score taken over all the candidates of
both sides (x − mean) / stddev. Z-scores put the unbounded, idf-weighted words' scores
and the cosines (at most 1) on one scale per query. A candidate no word of the query
matches has a words' score of 0; one not embedded yet has a z-score of 0 for its
meaning (neither helped nor hurt: ranked by its words).

Chosen on LoCoMo's dev split against reciprocal rank fusion (k 10 to 60), min-max sums
and neighbour weighting of the cosines (bench/fusion_study.py, docs/benchmarks.md): with
all-MiniLM-L6-v2 and 200 candidates a side, this is recall@10 0.777 against 0.754 for the
best RRF and 0.714 for the words alone. Since the z-scores are over the candidates, the
pool size is part of the formula (shared/search/meaning.py POOL).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

WORDS_WEIGHT = 0.4
MEANING_WEIGHT = 0.6

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Fused(Generic[Key]):
    key: Key
    score: float  # 0 for the weakest candidate: comparable within one answer only


def _z_scores(values: Sequence[float | None]) -> list[float]:
    """Each value's z-score among the present ones; 0 for a missing one, and for all when
    they do not vary."""
    present = [v for v in values if v is not None]
    if not present:
        return [0.0] * len(values)
    mean = math.fsum(present) / len(present)
    spread = math.sqrt(math.fsum((v - mean) ** 2 for v in present) / len(present))
    if spread == 0:
        return [0.0] * len(values)
    return [0.0 if v is None else (v - mean) / spread for v in values]


def fuse(
    words: Mapping[Key, float], meaning: Mapping[Key, float | None], *, limit: int
) -> list[Fused[Key]]:
    """Every candidate of either side, best first by the fused score (ties: the words'
    order, then the meaning's), at most `limit`. `meaning` maps a candidate to its cosine
    similarity, None when it has no vector."""
    keys = list(words) + [key for key in meaning if key not in words]
    by_words = _z_scores([words.get(key, 0.0) for key in keys])
    by_meaning = _z_scores([meaning.get(key) for key in keys])
    scores = [
        WORDS_WEIGHT * w + MEANING_WEIGHT * m for w, m in zip(by_words, by_meaning, strict=True)
    ]
    if not scores:
        return []
    floor = min(scores)
    ranked = sorted(range(len(keys)), key=lambda i: -scores[i])  # stable: the order above
    return [Fused(keys[i], scores[i] - floor) for i in ranked[:limit]]
