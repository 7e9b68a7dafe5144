"""At most `searches_per_org` searches of one org at once, across the web fleet.

A search over long messages can hold a pooled connection for seconds: 24 of one org at
once once took every connection of a web process, and another org's context read waited
10 s for one (503). So each search holds a lease of its org (shared/infra/leases.py)
while it runs, taken before it asks the pool for a connection; past the limit it is
refused (429 with Retry-After, `driftless_limit_hits_total{kind="searches"}`).
HTTP search and the recall tool (HTTP and MCP) both come through here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from shared.infra.db.uow import UnitOfWork
from shared.infra.leases import OrgLeases

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
    leases = OrgLeases(uow.redis, kind=KIND, lease_s=LEASE_S)
    # Without Redis the count is lost for now, not the search: it is a read of
    # PostgreSQL, still bounded by the statement timeout.
    lease_id = leases.admit(
        org_id=org_id, limit=uow.limits.searches_per_org, what="searches",
        retry_after_s=RETRY_AFTER_S,
    )  # fmt: skip
    try:
        yield
    finally:
        if lease_id is not None:
            leases.release(org_id=org_id, lease_id=lease_id)
