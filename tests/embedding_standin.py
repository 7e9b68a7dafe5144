"""The test stand-in's embedding: texts that share words are close, and nothing else is.

Each lower-cased word is hashed (sha256) into one of `dimensions` buckets with a sign from
another bit of its hash; the sum is L2-normalised. Deterministic, so a test can compute
the vector the server answered; a text without words gets a vector of its own (one bucket
of its whole hash), never zeros, which no real model answers either.
"""

from __future__ import annotations

import hashlib
import math
import re

DIMENSIONS = 64
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def embedding(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """The stand-in's vector of `text`: unit length, `dimensions` long."""
    vector = [0.0] * dimensions
    for word in words(text) or [text]:
        digest = hashlib.sha256(word.encode()).digest()
        bucket = int.from_bytes(digest[:8], "big") % dimensions
        vector[bucket] += 1.0 if digest[8] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:  # words that cancel out: still a vector of this text
        digest = hashlib.sha256(text.encode()).digest()
        vector[int.from_bytes(digest[:8], "big") % dimensions] = 1.0
        norm = 1.0
    return [x / norm for x in vector]


def cosine(a: list[float], b: list[float]) -> float:
    """Of two unit vectors: their dot product."""
    return sum(x * y for x, y in zip(a, b, strict=True))
