"""The pump's per-tick budget shared between orgs: a pure rule, tested without a database."""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Demand:
    """What one running campaign is owed this tick (pump.owed), and whose it is."""

    campaign_id: uuid.UUID
    org_id: uuid.UUID | None  # None: an operator's or beat's campaign, a tenant of its own
    owed: int


def share_budget(demands: Sequence[Demand], budget: int) -> dict[uuid.UUID, int]:
    """Each campaign's share of `budget` topics: one at a time, round robin across orgs
    (in the order of their first demand), and within an org across its campaigns; so an
    org's big campaign takes only what the other orgs leave."""
    granted = {demand.campaign_id: 0 for demand in demands}
    left = {demand.campaign_id: demand.owed for demand in demands}
    turns: dict[uuid.UUID | None, deque[uuid.UUID]] = {}
    for demand in demands:
        if demand.owed > 0:
            turns.setdefault(demand.org_id, deque()).append(demand.campaign_id)
    while budget > 0 and turns:
        for org_id in list(turns):
            if budget == 0:
                break
            queue = turns[org_id]
            campaign_id = queue.popleft()
            granted[campaign_id] += 1
            left[campaign_id] -= 1
            budget -= 1
            if left[campaign_id] > 0:
                queue.append(campaign_id)
            elif not queue:
                del turns[org_id]
    return granted
