"""The pump's arithmetic (shared/reevaluations/pump.py `owed`): a campaign gets its rate
times the time passed, a slow rate adds up across ticks, and a pause is not made up at once;
and the tick's budget shared fairly between orgs (budget.py `share_budget`)."""

from __future__ import annotations

import uuid

import pytest

from shared.reevaluations.budget import Demand, share_budget
from shared.reevaluations.pump import BURST_S, MAX_PER_TICK, TICK_S, owed


@pytest.mark.parametrize(
    ("rate", "elapsed_s", "expected"),
    [
        (5.0, 1.0, 5),
        (5.0, 0.5, 2),  # 2.5 owed: 2 now, the half carried over
        (5.0, 0.0, 0),
        (5.0, -3.0, 0),  # a clock that went back owes nothing
        (1000.0, 1.0, 1000),
        (0.1, 1.0, 0),
    ],
)
def test_a_tick_enqueues_the_rate_times_the_time_passed(
    rate: float, elapsed_s: float, expected: int
) -> None:
    assert owed(rate=rate, elapsed_s=elapsed_s)[0] == expected


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 2.5, 7.0, 333.3])
def test_over_many_ticks_the_rate_holds_fractions_included(rate: float) -> None:
    """What the pump does with the leftover (advanced_at = now - leftover) over 100 s."""
    clock, advanced_at, sent = 0.0, 0.0, 0
    for _ in range(int(100 / TICK_S)):
        clock += TICK_S
        count, leftover_s = owed(rate=rate, elapsed_s=clock - advanced_at)
        if count:
            sent += count
            advanced_at = clock - leftover_s
    assert abs(sent - rate * 100) <= 1


def test_after_a_pause_only_a_burst_is_made_up() -> None:
    assert owed(rate=5.0, elapsed_s=3600.0)[0] == 5 * BURST_S + 1
    # ...and a slow campaign still gets its topic, never a burst of zero.
    assert owed(rate=0.1, elapsed_s=3600.0)[0] == 1


def test_a_tick_never_passes_its_limit() -> None:
    assert owed(rate=1000.0, elapsed_s=60.0)[0] == MAX_PER_TICK
    assert owed(rate=1000.0, elapsed_s=60.0, limit=7)[0] == 7


# The tick's budget shared between orgs (shared/reevaluations/budget.py `share_budget`).
ORG_A, ORG_B, ORG_C = (uuid.UUID(int=n) for n in (1, 2, 3))


def test_one_orgs_big_campaign_leaves_the_other_orgs_what_they_are_owed() -> None:
    big, small = uuid.uuid4(), uuid.uuid4()
    demands = [Demand(big, ORG_A, MAX_PER_TICK), Demand(small, ORG_B, 5)]

    shares = share_budget(demands, MAX_PER_TICK)

    assert shares == {big: MAX_PER_TICK - 5, small: 5}


def test_the_budget_goes_round_robin_across_orgs_then_across_an_orgs_campaigns() -> None:
    a1, a2, a3, b1 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    demands = [Demand(a1, ORG_A, 50), Demand(a2, ORG_A, 50), Demand(a3, ORG_A, 50)]
    demands.append(Demand(b1, ORG_B, 50))

    shares = share_budget(demands, 60)

    assert shares[b1] == 30  # half the tick: one org of two
    assert sorted((shares[a1], shares[a2], shares[a3])) == [10, 10, 10]


def test_what_an_org_does_not_need_goes_to_the_others_and_nothing_passes_the_budget() -> None:
    a, b, c, operator = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    demands = [
        Demand(a, ORG_A, 3), Demand(b, ORG_B, 0), Demand(c, ORG_C, 500),
        Demand(operator, None, 500),  # beat's or an operator's: a tenant of its own
    ]  # fmt: skip

    shares = share_budget(demands, 100)

    assert shares == {a: 3, b: 0, c: 49, operator: 48}
    assert sum(shares.values()) == 100


@pytest.mark.parametrize("budget", [0, 1, 7, MAX_PER_TICK])
def test_no_campaign_gets_more_than_it_is_owed_nor_the_tick_more_than_its_budget(
    budget: int,
) -> None:
    demands = [
        Demand(uuid.uuid4(), org, owed) for org, owed in [(ORG_A, 4), (ORG_B, 2), (ORG_A, 1)]
    ]

    shares = share_budget(demands, budget)

    assert sum(shares.values()) == min(budget, 7)
    assert all(0 <= shares[d.campaign_id] <= d.owed for d in demands)
