"""Deliveries by a real Celery worker (in a thread, on the real broker) to a real receiver
on localhost that verifies every signature with `standardwebhooks`: retried until
delivered, with the same webhook-id on every attempt; dead after the last attempt; a
slow receiver holds its own few slots and never another org's deliveries."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import CeleryJobQueue
from shared.webhooks.slots import SLOTS_PER_WEBHOOK
from tests.conftest import new_key
from tests.helpers import wait_for
from tests.webhook_receiver import Answer, Receiver
from tests.worker_thread import worker_thread

MAX_ATTEMPTS = 4
SCOPE = "agentId=agent-1&userId=user-1"


@dataclass(frozen=True)
class System:
    client: FlaskClient  # the web app, sending jobs to the worker below
    factory: sessionmaker[Session]

    def new_org(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {new_key(self.factory)}"}

    def subscribe(self, auth: dict[str, str], receiver: Receiver, path: str = "/hook") -> str:
        answer: Any = self.client.post(
            "/agents-api/webhooks",
            headers=auth,
            json={"url": receiver.url + path, "events": ["facts.changed"]},
        )
        assert answer.status_code == 201, answer.json
        receiver.secret = answer.json["secret"]
        return str(answer.json["id"])

    def change_facts(self, auth: dict[str, str], **facts: str) -> None:
        answer = self.client.put(f"/agents-api/facts?{SCOPE}", headers=auth, json=facts)
        assert answer.status_code == 200, answer.json

    def deliveries(self, auth: dict[str, str], webhook_id: str) -> list[dict[str, Any]]:
        answer: Any = self.client.get(f"/agents-api/webhooks/{webhook_id}/deliveries", headers=auth)
        assert answer.status_code == 200, answer.json
        return list(answer.json["deliveries"])

    def settled(self, auth: dict[str, str], webhook_id: str, count: int) -> list[dict[str, Any]]:
        """The subscription's `count` deliveries, once none is still owed."""

        def probe() -> list[dict[str, Any]] | None:
            deliveries = self.deliveries(auth, webhook_id)
            owed = [d for d in deliveries if d["status"] in ("pending", "failed")]
            return deliveries if len(deliveries) == count and not owed else None

        return wait_for(probe, timeout=60, what=f"{count} deliveries to settle")


@pytest.fixture(scope="module")
def system(settings: Settings) -> Iterator[System]:
    import worker.tasks  # noqa: F401  (registers the shared tasks before the app finalizes)
    from web.app import create_app
    from worker.app import make_celery
    from worker.context import context_of

    local = settings.model_copy(
        update={
            "webhook_allow_private": True,  # the receiver is on 127.0.0.1
            "webhook_backoff_s": 0.1,
            "webhook_max_attempts": MAX_ATTEMPTS,
            "webhook_timeout_s": 5.0,
        }
    )
    celery_app = make_celery(local)
    # Queues of its own on the shared broker: no other test's worker takes these jobs.
    celery_app.conf.broker_transport_options = {
        **celery_app.conf.broker_transport_options,
        "global_keyprefix": f"webhooks-{uuid.uuid4().hex[:8]}:",
    }
    app = create_app(local, queue=CeleryJobQueue(celery_app))
    runtime = app.extensions["driftless"]
    try:
        # More threads than one subscription's slots: the isolation test needs room.
        with worker_thread(celery_app, concurrency=2 * SLOTS_PER_WEBHOOK):
            yield System(app.test_client(), runtime.session_factory)
    finally:
        context_of(celery_app).close()
        runtime.engine.dispose()


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
