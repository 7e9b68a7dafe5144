"""At most so many exports, and so many imports, of one org at once, across the web fleet.

An export reads a whole scope (an org, from the CLI) from one snapshot for as long as its
client takes to read it, and an import writes a file as fast as its client sends it:
heavy work that one org must not repeat until the pool is its own. Each holds a lease of
its org (shared/infra/leases.py) from its admission to its end, renewed on a timer while
it lasts, whether or not a line moves (a first query that sorts a large org, a client
that reads slowly), and given back at the end or when it is aborted. Past the limit it
is refused (429 with Retry-After, `driftless_limit_hits_total{kind="exports"|"imports"}`).
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref

import redis

from shared.domain.limits import MAX_EXPORTS_PER_ORG
from shared.infra.leases import OrgLeases

log = logging.getLogger(__name__)

KIND = "exports"
IMPORTS = "imports"
# Renewed every third of it while the work lasts, so a process that died mid-way frees
# its slot within this.
LEASE_S = 60
# An export or import lasts seconds to minutes: ask again a little later.
RETRY_AFTER_S = 10


class Slot:
    """One admitted export or import of an org: renewed on a timer until `release()`."""

    def __init__(self, leases: OrgLeases | None, org_id: uuid.UUID, lease_id: str | None) -> None:
        self._leases, self._org_id, self._lease_id = leases, org_id, lease_id
        self._released = threading.Event()
        if leases is not None:
            # The timer holds the slot weakly: a slot dropped without release() (a bug)
            # stops being renewed, and its lease lapses, rather than hold the org's count.
            threading.Thread(
                target=_renew_until_released,
                args=(weakref.ref(self), self._released, LEASE_S / 3),
                name=f"{leases.kind}-lease",
                daemon=True,
            ).start()

    def renew(self) -> None:
        if self._leases is None or self._lease_id is None:
            return
        try:
            if not self._leases.renew(org_id=self._org_id, lease_id=self._lease_id):
                log.warning("%s lease of org %s lapsed; going on", self._leases.kind, self._org_id)
        except redis.RedisError:
            log.warning("could not renew the %s lease of org %s", self._leases.kind, self._org_id)

    def release(self) -> None:
        self._released.set()
        if self._leases is not None and self._lease_id is not None:
            self._leases.release(org_id=self._org_id, lease_id=self._lease_id)
            self._lease_id = None


def _renew_until_released(
    slot: weakref.ref[Slot], released: threading.Event, every_s: float
) -> None:
    while not released.wait(every_s):
        held = slot()
        if held is None:
            return
        held.renew()
        del held


def admit_export(*, redis_client: redis.Redis | None, org_id: uuid.UUID) -> Slot:
    """A slot of the org's exports, or TooBusy when it holds MAX_EXPORTS_PER_ORG already."""
    return _admit(KIND, redis_client=redis_client, org_id=org_id, limit=MAX_EXPORTS_PER_ORG)


def admit_import(*, redis_client: redis.Redis | None, org_id: uuid.UUID, limit: int) -> Slot:
    """A slot of the org's imports, or TooBusy when it holds `limit` already."""
    return _admit(IMPORTS, redis_client=redis_client, org_id=org_id, limit=limit)


def _admit(kind: str, *, redis_client: redis.Redis | None, org_id: uuid.UUID, limit: int) -> Slot:
    if redis_client is None:  # a runtime without Redis (a script, the CLI): no cap
        return Slot(None, org_id, None)
    leases = OrgLeases(redis_client, kind=kind, lease_s=LEASE_S)
    # Without Redis the count is lost for now, not the work: the org's own pool share
    # still bounds it.
    lease_id = leases.admit(org_id=org_id, limit=limit, what=kind, retry_after_s=RETRY_AFTER_S)
    return Slot(None if lease_id is None else leases, org_id, lease_id)
