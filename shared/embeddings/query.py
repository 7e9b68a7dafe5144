"""A search query's vector, for the web: cached, or asked for under a short deadline.

A search must not wait on the embeddings server: past `deadline_s`, or on any failure, the
answer is None and the search stays lexical. Vectors are kept in Redis by a hash of the
model, the org, the server that embeds the org's texts and the text: the same query of
the same org is embedded once a day at most. The org is in the key, although the fleet's
vector of a text is the same for everyone, so that no org can tell from a search's speed
what another has searched for.
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

from shared.embeddings.provider import FLEET, Embedder, EmbeddingsTimeout, Routed
from shared.infra.metrics import QUERY_EMBEDDINGS

log = logging.getLogger(__name__)

KEY_PREFIX = "driftless:query-embedding:"
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.embedder = embedder
        self.deadline_s = deadline_s
        self.ttl_s = ttl_s
        self._redis = redis_client
        self._clock = clock
        self._lock = threading.Lock()
        self._next_log = 0.0
        self._unlogged = 0

    @property
    def model(self) -> str:
        """The model whose vectors the query's is compared with."""
        return self.embedder.model

    def vector(self, text: str, *, org_id: uuid.UUID | None) -> list[float] | None:
        """The text's vector, or None if it cannot be had within the deadline; never raises."""
        if not text.strip():
            return None  # servers refuse an empty input; there is nothing to mean
        try:
            key = self._key(text, org_id)
            cached = self._cached(key)
            if cached is not None:
                QUERY_EMBEDDINGS.labels("cached").inc()
                return cached
            (vector,) = self.embedder.embed([text], org_id=org_id, timeout_s=self.deadline_s)
        except EmbeddingsTimeout as exc:
            QUERY_EMBEDDINGS.labels("timeout").inc()
            self._complain("timed out", exc)
            return None
        except Exception as exc:  # any failure: the search goes on without its vector
            QUERY_EMBEDDINGS.labels("failed").inc()
            self._complain("failed", exc)
            return None
        QUERY_EMBEDDINGS.labels("embedded").inc()
        self._keep(key, vector)
        return vector

    def _key(self, text: str, org_id: uuid.UUID | None) -> str:
        embedder = self.embedder
        source = embedder.source(org_id) if isinstance(embedder, Routed) else FLEET
        parts = (embedder.model, str(org_id or "-"), source, text)
        return KEY_PREFIX + hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _cached(self, key: str) -> list[float] | None:
        try:
            raw = self._redis.get(key)
        except redis.RedisError as exc:
            log.debug("query embedding cache unread: %s", exc)
            return None
        if not isinstance(raw, bytes) or not raw or len(raw) % 8:
            return None
        return list(struct.unpack(f"<{len(raw) // 8}d", raw))

    def _keep(self, key: str, vector: list[float]) -> None:
        try:
            self._redis.set(key, struct.pack(f"<{len(vector)}d", *vector), ex=self.ttl_s)
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
