"""At most `searches_per_org` searches of one org at once, across the web fleet.

A search over long messages can hold a pooled connection for seconds: 24 of one org at
once once took every connection of a web process, and another org's context read waited
10 s for one (503). So each search holds a lease of its org (shared/infra/leases.py)
while it runs, taken before it asks the pool for a connection; past the limit it is
refused (429 with Retry-After, `driftless_limit_hits_total{kind="searches"}`).
HTTP search and the recall tool (HTTP and MCP) both come through here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from shared.domain.errors import TooBusy
from shared.infra.db.uow import UnitOfWork
from shared.infra.leases import OrgLeases
from shared.infra.metrics import LIMIT_HITS

log = logging.getLogger(__name__)

KIND = "searches"
# Longer than a search can last (the pool's 10 s wait plus the web's 5 s statement
# timeout), short enough that a process that died mid-search frees its slots soon.
LEASE_S = 30
# A search takes milliseconds, at worst the statement timeout: a slot frees soon.
RETRY_AFTER_S = 1


@contextmanager
def search_slot(*, uow: UnitOfWork, org_id: uuid.UUID) -> Iterator[None]:
    """Hold one of the org's search slots for the block, or raise TooBusy."""
    if uow.redis is None:  # a unit of work without Redis (a script, a test): no cap
        yield
        return
    limit = uow.limits.searches_per_org
    leases = OrgLeases(uow.redis, kind=KIND, lease_s=LEASE_S)
    try:
        lease_id = leases.acquire(org_id=org_id, limit=limit)
    except redis.RedisError:
        # The count is lost for now, not the search: it is a read of PostgreSQL, still
        # bounded by the statement timeout.
        log.warning("search slots unavailable (Redis); searching uncounted", exc_info=True)
        yield
        return
    if lease_id is None:
        LIMIT_HITS.labels(kind=KIND).inc()
        log.info("search refused: org %s already runs %d searches", org_id, limit)
        raise TooBusy(
            f"this organization already runs {limit} searches at once; retry in {RETRY_AFTER_S} s",
            retry_after_s=RETRY_AFTER_S,
        )
    try:
        yield
    finally:
        leases.release(org_id=org_id, lease_id=lease_id)
