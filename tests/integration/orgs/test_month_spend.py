"""An org's month of tokens in Redis ([4.1]): a reservation that is never settled (its
worker killed mid-call) lapses and gives its tokens back, and a late settle of a lapsed
reservation does not give them back twice."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest
import redis

from shared.orgs.spend import Admission, MonthlySpend

MONTH = dt.date(2026, 12, 1)
LAPSE_S = 0.3


@pytest.fixture
def spend(redis_client: redis.Redis) -> MonthlySpend:
    return MonthlySpend(redis_client, seed=lambda _org, _month: 0, reservation_s=LAPSE_S)


def test_a_reservation_never_settled_lapses_and_the_org_is_admitted_again_41(
    spend: MonthlySpend,
) -> None:
    org = uuid.uuid4()
    held = spend.reserve(org_id=org, month=MONTH, monthly_tokens=1000, tokens=600)
    assert held.admission is Admission.RESERVED
    # The held call is in flight: another that does not fit beside it waits.
    waits = spend.reserve(org_id=org, month=MONTH, monthly_tokens=1000, tokens=600)
    assert waits.admission is Admission.WAIT

    time.sleep(LAPSE_S + 0.2)  # the held call's worker died: nothing settles it

    again = spend.reserve(org_id=org, month=MONTH, monthly_tokens=1000, tokens=600)
    assert again.admission is Admission.RESERVED


def test_a_late_settle_of_a_lapsed_reservation_counts_its_tokens_once_41(
    spend: MonthlySpend,
) -> None:
    org = uuid.uuid4()
    late = spend.reserve(org_id=org, month=MONTH, monthly_tokens=1000, tokens=600)
    time.sleep(LAPSE_S + 0.2)
    current = spend.reserve(org_id=org, month=MONTH, monthly_tokens=1000, tokens=300)
    assert current.admission is Admission.RESERVED

    # The slow call ends after all: its tokens are used, its lapsed reservation is not
    # subtracted from the one still in flight.
    spend.settle(org_id=org, month=MONTH, reservation=late, used=100)
    assert spend.used(org, MONTH) == 100
    # 100 used + 300 still reserved + 700 > 1000: this one must wait for the 300.
    assert (
        spend.reserve(org_id=org, month=MONTH, monthly_tokens=1000, tokens=700).admission
        is Admission.WAIT
    )
    spend.settle(org_id=org, month=MONTH, reservation=current, used=200)
    assert spend.used(org, MONTH) == 300
    assert (
        spend.reserve(org_id=org, month=MONTH, monthly_tokens=1000, tokens=700).admission
        is Admission.RESERVED
    )
