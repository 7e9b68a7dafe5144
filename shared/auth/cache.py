"""Which org a presented key belongs to, remembered for a few seconds per process.

Every API request presents its key; looking it up costs a database round trip and a
pool checkout, a quarter of a message post's time before this cache. Only live keys
are remembered (an unknown key is looked up every time, so a key just created works at
once), and each for `ttl_s` seconds at most: a revoked key stops working on every
process within that time (CONTRACT.md, `driftless keys revoke`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from cachetools import TTLCache

from shared.auth.service import hash_key, org_for_key
from shared.infra.db.uow import UnitOfWork

# Distinct keys one process remembers; beyond it the oldest are looked up again.
MAX_KEYS = 10_000


class KeyCache:
    def __init__(self, *, ttl_s: float, unit_of_work: Callable[[], UnitOfWork]) -> None:
        self.ttl_s = ttl_s
        self._unit_of_work = unit_of_work
        # The clock is looked up at each call (not bound at import) so tests can move it.
        self._orgs: TTLCache[str, uuid.UUID] = TTLCache(
            maxsize=MAX_KEYS, ttl=max(ttl_s, 1e-9), timer=lambda: time.monotonic()
        )
        self._lock = threading.Lock()  # TTLCache is not thread-safe

    def org_for_key(self, key: str) -> uuid.UUID | None:
        """The org of a live key, or None for an unknown or revoked one."""
        digest = hash_key(key)  # the key itself is never kept
        if self.ttl_s > 0:
            with self._lock:
                org_id = self._orgs.get(digest)
            if org_id is not None:
                return org_id
        with self._unit_of_work() as uow:
            org_id = org_for_key(uow=uow, key=key)
        if org_id is not None and self.ttl_s > 0:
            with self._lock:
                self._orgs[digest] = org_id
        return org_id
