"""Fair under every quota (shared/infra/fair.py, worker/fair.py) through the web and a real
worker: an org a quota turns away yields its turn, its jobs wait in its own list (not in a
worker's slot, not in the broker), and the next call the quota allows goes to the next
org in the ring."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.orgs.budget import BudgetDefaults, org_budget
from shared.providers.service import set_provider
from tests.integration.orgs.budget import give_budget
from tests.integration.providers.orgs import BOX, new_uow
from tests.integration.reevaluations.system import SUMMARY, System, campaign_system
from tests.integration.reevaluations.world import topics_of
from tests.integration.webhooks.outbox import org_of
from tests.llm_server import FakeOpenAI, Reply

# Four calls a minute for the fleet: a bucket of one call, refilled every 16.5 s. The
# refill is the window in which org B's close must reach the ring: at ten a minute (6.6 s)
# a loaded CI machine once missed it.
FLEET_RPM = 4


def _clear_buckets(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match="driftless:llm-rate:*"):
        client.delete(key)
    client.close()


@pytest.fixture
def quota_system(settings: Settings, fake_openai: FakeOpenAI) -> Iterator[System]:
    _clear_buckets(settings.redis_url)
    with campaign_system(
        settings, fake_openai, fair=True, overrides={"llm_rpm": FLEET_RPM}
    ) as built:
        yield built
    _clear_buckets(settings.redis_url)


def _until(condition: Callable[[], bool], *, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_org_out_of_the_fleets_quota_yields_its_turn_to_the_next_org_41(
    quota_system: System, fake_openai: FakeOpenAI
) -> None:
    system, fair = quota_system, quota_system.fair
    assert fair is not None
    fake_openai.answer_json(SUMMARY)
    org_a, org_b = system.new_org(), system.new_org()
    backlog = topics_of(system.client, org_a, closed=3, active=False)
    # Two slots: at the refill both pop a job, B's and A's second, and B's trial (fair.py)
    # holds A back until B's call is granted; before, a loaded machine let A's warm job
    # reach the bucket first (3 of 5 runs beside three CPU hogs).
    with system.worker(concurrency=2):
        # A's first call takes the fleet's one call; its next two find no room.
        _until(lambda: system.summarized(backlog) == 1 and fair.waiting("live").jobs == 2)
        behind = topics_of(system.client, org_b, closed=1, active=False)
        system.until_summarized(behind)
        # B's close took the fleet's next call, before A's second: A's two waited in A's
        # list (not asleep in the worker's two slots, where each took its turn before, nor
        # in the broker). The call after B's is a whole refill away.
        assert system.summarized(backlog) == 1
    assert fake_openai.calls == 2  # every refused call was refused before the model


def test_a_slow_answer_is_not_a_quota_the_ring_still_serves_in_turn_41(
    quota_system: System, fake_openai: FakeOpenAI
) -> None:
    # Nothing held: a lane with work and no quota pressure serves every job once.
    system = quota_system
    fake_openai.slow(0.1, json.dumps(SUMMARY))
    org = system.new_org()
    one = topics_of(system.client, org, closed=1, active=False)
    with system.worker(concurrency=2):
        system.until_summarized(one)
    assert fake_openai.calls == 1


def test_an_orgs_slow_own_model_holds_only_its_share_of_the_slots_41(
    settings: Settings, fake_openai: FakeOpenAI
) -> None:
    overrides = {"own_model_calls_per_org": 2, "webhook_allow_private": True}
    with (
        campaign_system(settings, fake_openai, fair=True, overrides=overrides) as system,
        FakeOpenAI() as own,
    ):
        assert system.fair is not None
        own.slow(3.0, json.dumps(SUMMARY))  # A's own model: every answer takes 3 s
        org_a, org_b = system.new_org(), system.new_org()
        with new_uow(system.factory) as uow:
            set_provider(
                uow=uow, org_id=org_of(system.factory, org_a), base_url=own.base_url,
                api_key="sk-own", model="own-model", box=BOX, allow_private=True,
            )  # fmt: skip
            uow.commit()
        slow = topics_of(system.client, org_a, closed=4, active=False)
        with system.worker(concurrency=4):
            _until(lambda: own.in_flight == 2)
            behind = topics_of(system.client, org_b, closed=1, active=False)
            system.until_summarized(behind)
            # Two of A's calls hold two of the four slots; A's other two wait in A's
            # list (not in slots), and B's close took a free slot at once.
            assert own.calls == 2
            assert system.summarized(slow) == 0
            assert system.fair.waiting("live").jobs == 2
            system.until_summarized(slow)  # A's last two are served as its calls end
        assert own.calls == 4


def test_a_monthly_budget_is_overshot_by_one_call_at_most_with_calls_in_flight_41(
    system: System, fake_openai: FakeOpenAI
) -> None:
    # The check ran before each call and the charge after it: every call in flight passed
    # (a probe's 1,000-token budget gave 20-26k tokens). Each call here uses 400 tokens.
    fake_openai.answer_with(lambda _: Reply(json.dumps(SUMMARY), delay_s=0.3, usage=(300, 100)))
    auth = system.new_org()
    org_id = org_of(system.factory, auth)
    give_budget(system.factory, org_id, monthly_tokens=1000)
    closed = topics_of(system.client, auth, closed=8, active=False)
    with system.worker(concurrency=4):
        system.until_summarized(closed)  # the model's summaries, then R14's fallbacks
    assert fake_openai.calls <= 3  # 400 + 400 fit; a lone third goes past by itself
    with UnitOfWork(system.factory, RecordingQueue()) as uow:
        used = org_budget(uow=uow, org_id=org_id, defaults=BudgetDefaults(0, 0)).tokens_used
    assert used <= 1000 + 400
