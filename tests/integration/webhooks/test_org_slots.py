"""Attempts in flight are capped per org (DRIFTLESS_WEBHOOKS_PER_ORG) as well as per
subscription: an org's slow receivers, however many subscriptions they are, hold at most
its share of the workers; another org's events go through meanwhile, at a free worker's
latency even past 20 receivers trickling their answers; the refused attempts are
counted, and made once a slot is free."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared.infra.config import Settings
from tests.helpers import wait_for
from tests.integration.webhooks.system import System, running_system
from tests.webhook_receiver import Answer, Receiver

PER_ORG = 2
HOOKS = 3  # subscriptions of the busy org, each with its own 4 slots
EVENTS = 2
STALL_S = 8.0  # the longest a stalled answer waits: within the attempts' deadline


@pytest.fixture(scope="module")
def system(settings: Settings) -> Iterator[System]:
    # Threads for every delivery of the busy org at once, and more: only the org's
    # limit can keep them from being taken.
    with running_system(
        settings, concurrency=HOOKS * EVENTS + 2, webhooks_per_org=PER_ORG,
        webhook_timeout_s=STALL_S + 4,
    ) as system:  # fmt: skip
        yield system


def _org_refusals() -> float:
    return REGISTRY.get_sample_value("driftless_limit_hits_total", {"kind": "webhooks"}) or 0.0


def test_an_orgs_attempts_in_flight_stop_at_its_limit_and_another_orgs_go_through(
    system: System,
) -> None:
    busy_org, other_org = system.new_org(), system.new_org()
    gate = threading.Event()
    refused_before = _org_refusals()

    def stall(_request: Any, _n: int) -> Answer:
        gate.wait(timeout=STALL_S)
        return Answer(204)

    with Receiver() as slow, Receiver() as other:
        slow.answer_with(stall)
        hooks = [system.subscribe(busy_org, slow, path=f"/hook-{i}") for i in range(HOOKS)]
        slow.secret = None  # three subscriptions, three secrets: logged, not verified
        other_hook = system.subscribe(other_org, other)
        for i in range(EVENTS):
            system.change_facts(busy_org, step=str(i))
        wait_for(lambda: slow.in_flight == PER_ORG, what="the busy org's slots taken")
        wait_for(lambda: _org_refusals() > refused_before, what="an attempt refused")

        system.change_facts(other_org, plan="pro")
        (delivered,) = system.settled(other_org, other_hook, 1)

        assert delivered["status"] == "delivered"
        assert slow.in_flight == PER_ORG  # still stalled, and no more than the org's share
        gate.set()
        settled = [system.settled(busy_org, hook, EVENTS) for hook in hooks]

    assert slow.most_in_flight == PER_ORG
    assert all(d["status"] == "delivered" for deliveries in settled for d in deliveries)
    assert len(other.events()) == 1


def test_twenty_trickling_receivers_of_one_org_leave_another_orgs_delivery_its_latency(
    system: System,
) -> None:
    busy_org, other_org = system.new_org(), system.new_org()
    with Receiver() as trickling, Receiver() as other:
        # Each byte within any per-read timeout; the whole head past the attempt's deadline.
        trickling.answer_with(lambda _request, _n: Answer(204, trickle_s=0.3))
        hooks = [system.subscribe(busy_org, trickling, path=f"/t-{i}") for i in range(20)]
        other_hook = system.subscribe(other_org, other)
        system.change_facts(busy_org, plan="pro")  # 20 deliveries, each trickled
        wait_for(lambda: trickling.in_flight == PER_ORG, what="the busy org's slots taken")

        started = time.monotonic()
        system.change_facts(other_org, plan="pro")
        (delivered,) = system.settled(other_org, other_hook, 1)
        latency = time.monotonic() - started

        assert delivered["status"] == "delivered"
        assert latency < 5.0  # generous: a free worker thread's, not a trickle's 20 s
        assert trickling.in_flight <= PER_ORG
        for hook in hooks:  # their deliveries go with them: nothing left to trickle
            deleted = system.client.delete(f"/agents-api/webhooks/{hook}", headers=busy_org)
            assert deleted.status_code == 204
    assert trickling.most_in_flight == PER_ORG
