"""Deliveries by a real Celery worker (in a thread, on the real broker) to a real receiver
on localhost that verifies every signature with `standardwebhooks`: retried until
delivered, with the same webhook-id on every attempt; dead after the last attempt; a
slow receiver holds its own few slots and never another org's deliveries."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared.infra.config import Settings
from shared.webhooks.slots import SLOTS_PER_WEBHOOK
from tests.helpers import wait_for
from tests.integration.webhooks.system import System, running_system
from tests.webhook_receiver import Answer, Receiver

MAX_ATTEMPTS = 4


@pytest.fixture(scope="module")
def system(settings: Settings) -> Iterator[System]:
    overrides = {"webhook_max_attempts": MAX_ATTEMPTS, "webhook_timeout_s": 5.0}
    # More threads than one subscription's slots: the isolation test needs room.
    with running_system(settings, concurrency=2 * SLOTS_PER_WEBHOOK, **overrides) as system:
        yield system


def test_a_receiver_failing_the_first_attempts_gets_each_event_once_after_deduplication(
    system: System,
) -> None:
    auth = system.new_org()
    with Receiver() as receiver:
        receiver.answer_with(lambda _request, n: Answer(500 if n <= 2 else 204))
        webhook_id = system.subscribe(auth, receiver)
        for plan in ("free", "pro", "team"):
            system.change_facts(auth, plan=plan)

        deliveries = system.settled(auth, webhook_id, 3)

    events = receiver.events()
    assert sorted(event["data"]["facts"]["plan"] for event in events.values()) == [
        "free", "pro", "team",
    ]  # fmt: skip
    assert all(event["type"] == "facts.changed" for event in events.values())
    assert {d["eventId"] for d in deliveries} == set(events)  # webhook-id is the event's id
    for delivery in deliveries:
        assert (delivery["status"], delivery["attempts"]) == ("delivered", 3)
        assert delivery["lastStatusCode"] == 204 and delivery["deliveredAt"] is not None
        assert receiver.attempts_of(delivery["eventId"]) == 3
    assert all(r.verified is not None for r in receiver.requests)  # every attempt signed


def test_a_delivery_never_accepted_is_dead_after_the_last_attempt_and_counted(
    system: System,
) -> None:
    auth = system.new_org()
    dead_before = REGISTRY.get_sample_value(
        "driftless_webhook_deliveries_total", {"status": "dead"}
    )
    with Receiver() as receiver:
        receiver.answer_with(lambda _request, _n: Answer(503))
        webhook_id = system.subscribe(auth, receiver)
        system.change_facts(auth, plan="pro")

        (delivery,) = system.settled(auth, webhook_id, 1)

    assert (delivery["status"], delivery["attempts"]) == ("dead", MAX_ATTEMPTS)
    assert delivery["lastStatusCode"] == 503 and delivery["deliveredAt"] is None
    assert receiver.attempts_of(delivery["eventId"]) == MAX_ATTEMPTS
    dead_after = REGISTRY.get_sample_value("driftless_webhook_deliveries_total", {"status": "dead"})
    assert (dead_after or 0) - (dead_before or 0) == 1


def test_a_stalled_receiver_holds_only_its_own_slots_and_another_orgs_events_go_through(
    system: System,
) -> None:
    stalled_org, other_org = system.new_org(), system.new_org()
    gate = threading.Event()
    in_flight, most_in_flight = [0], [0]
    lock = threading.Lock()

    def stall(_request: Any, _n: int) -> Answer:
        with lock:
            in_flight[0] += 1
            most_in_flight[0] = max(most_in_flight[0], in_flight[0])
        gate.wait(timeout=30)
        with lock:
            in_flight[0] -= 1
        return Answer(204)

    with Receiver() as stalled, Receiver() as other:
        stalled.answer_with(stall)
        stalled_hook = system.subscribe(stalled_org, stalled)
        other_hook = system.subscribe(other_org, other)
        for i in range(3 * SLOTS_PER_WEBHOOK):
            system.change_facts(stalled_org, step=str(i))
        wait_for(lambda: in_flight[0] == SLOTS_PER_WEBHOOK, what="the stalled receiver's slots")

        system.change_facts(other_org, plan="pro")
        (delivered,) = system.settled(other_org, other_hook, 1)

        assert delivered["status"] == "delivered"
        assert in_flight[0] == SLOTS_PER_WEBHOOK  # still stalled, and no more than its slots
        gate.set()
        system.settled(stalled_org, stalled_hook, 3 * SLOTS_PER_WEBHOOK)

    assert most_in_flight[0] == SLOTS_PER_WEBHOOK
    assert len(stalled.events()) == 3 * SLOTS_PER_WEBHOOK


def test_a_redirect_is_followed_with_the_same_signed_request(system: System) -> None:
    auth = system.new_org()
    with Receiver() as receiver:
        moved = Answer(308, location="/new")
        receiver.answer_with(lambda request, _n: Answer(204) if request.path == "/new" else moved)
        webhook_id = system.subscribe(auth, receiver, path="/old")
        system.change_facts(auth, plan="pro")

        (delivery,) = system.settled(auth, webhook_id, 1)

    assert (delivery["status"], delivery["attempts"]) == ("delivered", 1)
    assert [r.path for r in receiver.requests] == ["/old", "/new"]
    assert all(r.verified is not None for r in receiver.requests)
