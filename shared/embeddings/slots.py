"""At most `per_org` calls of one org to its own embeddings server at once, fleet-wide.

A slow or failing server of one org must not take the embeddings workers' slots from the
others (docs/architecture.md, "Vectors"): each call to an org's own server holds a lease of
its org (shared/infra/leases.py, the searches' kind of count), taken before the call; an
org at its cap does not wait for one: its texts are left for later (the reconciler sends
them again), counted in `driftless_limit_hits_total{kind="embeddings"}`. The default cap
is a quarter of a worker's 128 slots, as the webhooks' (DRIFTLESS_EMBEDDINGS_PER_ORG).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from shared.infra.leases import OrgLeases
from shared.infra.metrics import LIMIT_HITS

log = logging.getLogger(__name__)

OWN_CALLS = "embeddings"
# A quarter of a worker's 128 slots (DRIFTLESS_EMBEDDINGS_PER_ORG's default).
PER_ORG = 32
# Longer than any call (its deadline is the model's timeout), short enough that a worker
# killed mid-call frees its org's slot soon; a call that ends gives it back at once.
LEASE_S = 300.0


class OwnServerSlots:
    """The fleet-wide count of each org's calls in flight to its own embeddings server."""

    def __init__(self, client: redis.Redis | None, *, per_org: int) -> None:
        self._leases = (
            None if client is None else OrgLeases(client, kind=OWN_CALLS, lease_s=LEASE_S)
        )
        self._per_org = per_org

    @contextmanager
    def slot(self, org_id: uuid.UUID) -> Iterator[bool]:
        """True while the block holds one of the org's slots; False: the org is at its cap."""
        if self._leases is None:  # no Redis given (a script): uncounted
            yield True
            return
        try:
            lease_id = self._leases.acquire(org_id=org_id, limit=self._per_org)
        except redis.RedisError:
            # The count is lost for now, not the vectors: the call keeps its own deadline.
            log.warning("embeddings slots unavailable (Redis); calling uncounted")
            yield True
            return
        if lease_id is None:
            LIMIT_HITS.labels(kind=OWN_CALLS).inc()
            yield False
            return
        try:
            yield True
        finally:
            self._leases.release(org_id=org_id, lease_id=lease_id)
