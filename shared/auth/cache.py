"""Which org a presented key belongs to, remembered for a few seconds per process.

Every API request presents its key; looking it up costs a database round trip and a
pool checkout, a quarter of a message post's time before this cache. Only live keys
are remembered (an unknown key is looked up every time, so a key just created works at
once), and each for `ttl_s` seconds at most: a revoked key stops working on every
process within that time (docs/contract.md, `driftless keys revoke`). A caller that must
notice sooner (an open event stream, at each ping) asks for an answer no older than it
can accept, and a key found revoked is forgotten for every caller of the process.

Along with the org comes its own request rate limit (`Caller`), so enforcing it costs
no query either; a changed limit reaches every process within the same `ttl_s`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from cachetools import TTLCache

from shared.auth.service import Caller, caller_for_key, hash_key
from shared.infra.db.uow import UnitOfWork

# Distinct keys one process remembers; beyond it the oldest are looked up again.
MAX_KEYS = 10_000


class KeyCache:
    def __init__(self, *, ttl_s: float, unit_of_work: Callable[[], UnitOfWork]) -> None:
        self.ttl_s = ttl_s
        self._unit_of_work = unit_of_work
        # Each key's caller and when it was looked up. The clock is looked up at each call
        # (not bound at import) so tests can move it.
        self._orgs: TTLCache[str, tuple[Caller, float]] = TTLCache(
            maxsize=MAX_KEYS, ttl=max(ttl_s, 1e-9), timer=lambda: time.monotonic()
        )
        self._lock = threading.Lock()  # TTLCache is not thread-safe

    def org_for_key(self, key: str, *, max_age_s: float | None = None) -> uuid.UUID | None:
        """The org of a live key, or None for an unknown or revoked one; what was looked
        up more than `max_age_s` ago (default: the cache's TTL) is looked up again."""
        caller = self.caller_for_key(key, max_age_s=max_age_s)
        return None if caller is None else caller.org_id

    def caller_for_key(self, key: str, *, max_age_s: float | None = None) -> Caller | None:
        """As `org_for_key`, with the org's request limits."""
        digest = hash_key(key)  # the key itself is never kept
        if self.ttl_s > 0:
            with self._lock:
                remembered = self._orgs.get(digest)
            if remembered is not None:
                known, looked_up = remembered
                if max_age_s is None or time.monotonic() - looked_up < max_age_s:
                    return known
        looked_up = time.monotonic()
        with self._unit_of_work() as uow:
            caller = caller_for_key(uow=uow, key=key)
        if self.ttl_s > 0:
            with self._lock:
                if caller is None:
                    self._orgs.pop(digest, None)
                else:
                    self._orgs[digest] = (caller, looked_up)
        return caller
