"""At most MAX_EXPORTS_PER_ORG exports of one org at once, across the web fleet.

An export reads a whole scope (an org, from the CLI) on one pooled connection for as
long as its client takes to read it: a heavy read that one org must not repeat until the
pool is its own. Each export holds a lease of its org (shared/infra/leases.py) from its
admission to its last line, renewed while it streams; past the limit it is refused
(429 with Retry-After, `driftless_limit_hits_total{kind="exports"}`).
"""

from __future__ import annotations

import logging
import time
import uuid

import redis

from shared.domain.errors import TooBusy
from shared.domain.limits import MAX_EXPORTS_PER_ORG
from shared.infra.leases import OrgLeases
from shared.infra.metrics import LIMIT_HITS

log = logging.getLogger(__name__)

KIND = "exports"
# Renewed while the export streams (every third of it), so a process that died
# mid-export frees its slot within this.
LEASE_S = 60
# An export lasts seconds to minutes: ask again a little later.
RETRY_AFTER_S = 10


class ExportSlot:
    """One admitted export of an org: renew it as the lines go, release it at the end."""

    def __init__(self, leases: OrgLeases | None, org_id: uuid.UUID, lease_id: str | None) -> None:
        self._leases, self._org_id, self._lease_id = leases, org_id, lease_id
        self._renewed_at = time.monotonic()

    def keep(self) -> None:
        """Renew the lease when a third of it has gone (cheap to call on every line)."""
        if self._leases is None or self._lease_id is None:
            return
        now = time.monotonic()
        if now - self._renewed_at < LEASE_S / 3:
            return
        self._renewed_at = now
        try:
            if not self._leases.renew(org_id=self._org_id, lease_id=self._lease_id):
                log.warning("export lease of org %s lapsed; streaming on", self._org_id)
        except redis.RedisError:
            log.warning("could not renew the export lease of org %s", self._org_id)

    def release(self) -> None:
        if self._leases is not None and self._lease_id is not None:
            self._leases.release(org_id=self._org_id, lease_id=self._lease_id)
            self._lease_id = None


def admit_export(*, redis_client: redis.Redis | None, org_id: uuid.UUID) -> ExportSlot:
    """A slot of the org's exports, or TooBusy when it holds MAX_EXPORTS_PER_ORG already."""
    if redis_client is None:  # a runtime without Redis (a script, a test): no cap
        return ExportSlot(None, org_id, None)
    leases = OrgLeases(redis_client, kind=KIND, lease_s=LEASE_S)
    try:
        lease_id = leases.acquire(org_id=org_id, limit=MAX_EXPORTS_PER_ORG)
    except redis.RedisError:
        # The count is lost for now, not the export: the org's own pool share still bounds it.
        log.warning("export slots unavailable (Redis); exporting uncounted", exc_info=True)
        return ExportSlot(None, org_id, None)
    if lease_id is None:
        LIMIT_HITS.labels(kind=KIND).inc()
        log.info("export refused: org %s already runs %d exports", org_id, MAX_EXPORTS_PER_ORG)
        raise TooBusy(
            f"this organization already runs {MAX_EXPORTS_PER_ORG} exports at once;"
            f" retry in {RETRY_AFTER_S} s",
            retry_after_s=RETRY_AFTER_S,
        )
    return ExportSlot(leases, org_id, lease_id)
