"""A search query's vector, for the web: cached, or asked for under a short deadline.

A search must not wait on the embeddings server: past `deadline_s`, on any failure, or when
the answer is not a vector the model's stored ones can be compared with (another size,
longer than pgvector takes, not finite), the answer is None and the search stays lexical.

Vectors are kept in Redis, in one hash per org, by a hash of the model, the server that
embeds the org's texts and the text: the same query of the same org is embedded once a
day at most while it stays cached. Each org's hash holds at most `max_entries` vectors and
`max_bytes` (single precision, as pgvector stores them); past either a random one makes
room, so an org's searches cannot fill Redis, and a vector that failed its checks is
never kept. The org is in the key, although the fleet's vector of a text is the same for
everyone, so that no org can tell from a search's speed what another has searched for.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import threading
import time
import uuid
from collections.abc import Callable

import redis

from shared.embeddings.provider import (
    FLEET_CONFIG,
    Embedder,
    EmbeddingsTimeout,
    InvalidVectors,
    Routed,
)
from shared.infra.metrics import QUERY_EMBEDDINGS

log = logging.getLogger(__name__)

KEY_PREFIX = "driftless:query-embedding:"
# Per org: 256 vectors of 1,536 dimensions are 1.5 MiB; a larger model keeps fewer.
MAX_ENTRIES = 256
MAX_BYTES = 2 * 1024 * 1024
# KEYS: the org's hash. ARGV: field, vector, most entries, seconds to live. A new field
# past the bound takes a random one's place.
_KEEP = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
   and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  redis.call('HDEL', KEYS[1], redis.call('HRANDFIELD', KEYS[1]))
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""
# One line a minute at most: a dead server would otherwise log every search.
LOG_EVERY_S = 60.0


class QueryEmbeddings:
    """Search queries' vectors, cached in Redis; None rather than a slow search."""

    def __init__(
        self,
        embedder: Embedder,
        redis_client: redis.Redis,
        *,
        deadline_s: float = 0.3,
        ttl_s: int = 86400,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.embedder = embedder
        self.deadline_s = deadline_s
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._redis = redis_client
        self._keep_script = redis_client.register_script(_KEEP)
        self._clock = clock
        self._lock = threading.Lock()
        self._next_log = 0.0
        self._unlogged = 0

    @property
    def model(self) -> str:
        """The model whose vectors the query's is compared with."""
        return self.embedder.model

    def vector(
        self, text: str, *, org_id: uuid.UUID | None, dimensions: int | None = None
    ) -> list[float] | None:
        """The text's vector, or None if it cannot be had within the deadline or is not one
        of the model's size (`dimensions`, its stored vectors', which the search compares
        it with; else the configured one); never raises."""
        if not text.strip():
            return None  # servers refuse an empty input; there is nothing to mean
        expected = dimensions or self.embedder.dimensions
        try:
            key, field = self._key(text, org_id)
            cached = self._cached(key, field)
            if cached is not None and expected in (None, len(cached)):
                QUERY_EMBEDDINGS.labels("cached").inc()
                return cached
            (vector,) = self.embedder.embed(
                [text], org_id=org_id, timeout_s=self.deadline_s, dimensions=expected
            )
        except EmbeddingsTimeout as exc:
            QUERY_EMBEDDINGS.labels("timeout").inc()
            self._complain("timed out", exc)
            return None
        except InvalidVectors as exc:  # nothing cached: a search by words
            QUERY_EMBEDDINGS.labels("invalid").inc()
            self._complain("is unusable", exc)
            return None
        except Exception as exc:  # any failure: the search goes on without its vector
            QUERY_EMBEDDINGS.labels("failed").inc()
            self._complain("failed", exc)
            return None
        QUERY_EMBEDDINGS.labels("embedded").inc()
        self._keep(key, field, vector)
        return vector

    def cached_count(self, org_id: uuid.UUID | None) -> int:
        """How many query vectors the org has cached."""
        return int(self._redis.hlen(_org_key(org_id)))

    def _key(self, text: str, org_id: uuid.UUID | None) -> tuple[str, str]:
        """The org's hash and the text's field in it."""
        embedder = self.embedder
        source = embedder.source(org_id) if isinstance(embedder, Routed) else FLEET_CONFIG
        parts = (embedder.model, str(org_id or "-"), source, text)
        return _org_key(org_id), hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _cached(self, key: str, field: str) -> list[float] | None:
        try:
            raw = self._redis.hget(key, field)
        except redis.RedisError as exc:
            log.debug("query embedding cache unread: %s", exc)
            return None
        if not isinstance(raw, bytes) or not raw or len(raw) % 4:
            return None
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))

    def _keep(self, key: str, field: str, vector: list[float]) -> None:
        packed = struct.pack(f"<{len(vector)}f", *vector)
        entries = max(1, min(self.max_entries, self.max_bytes // len(packed)))
        try:
            self._keep_script(keys=[key], args=[field, packed, entries, self.ttl_s])
        except redis.RedisError as exc:
            log.debug("query embedding not cached: %s", exc)

    def _complain(self, what: str, exc: Exception) -> None:
        with self._lock:
            now = self._clock()
            if now < self._next_log:
                self._unlogged += 1
                return
            unlogged, self._unlogged = self._unlogged, 0
            self._next_log = now + LOG_EVERY_S
        log.warning(
            "a search query's embedding %s (%d more since the last line; searches are lexical"
            " meanwhile): %s",
            what, unlogged, exc,
        )  # fmt: skip


def _org_key(org_id: uuid.UUID | None) -> str:
    # The org in braces: a Redis Cluster keeps each org's hash on one slot.
    return f"{KEY_PREFIX}{{{org_id or '-'}}}"
