"""`kill -9` of the worker in the middle of webhook deliveries loses none.

The receiver holds the first attempt of every event unanswered, so the kill is certain
to find deliveries in flight. Their claims are leases: once a lease ends, the beat's
dispatcher (every DRIFTLESS_RECONCILE_S) sends their jobs again and the next worker
delivers them. The receiver may see an event twice (the held attempt reached it); by
its `webhook-id` it keeps each once, and every event the outbox recorded arrives.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from shared.webhooks.slots import SLOTS_PER_WEBHOOK
from tests.faults.conftest import new_api_key, report
from tests.faults.http import Api
from tests.faults.procs import PrivateRedis, Processes, free_port, system_env, wait_until
from tests.llm_server import FakeOpenAI
from tests.webhook_receiver import Answer, Received, Receiver

EVENTS = 12
HOLD_LIMIT_S = 30


@pytest.mark.faults
def test_kill_9_mid_delivery_every_event_still_arrives(
    processes: Processes, private_redis: PrivateRedis, fresh_database: str, fake_llm: FakeOpenAI
) -> None:
    release = threading.Event()
    held = [0]  # first attempts waiting for their answer right now
    lock = threading.Lock()

    def hold_first_attempts(_request: Received, n: int) -> Answer:
        if n == 1:
            with lock:
                held[0] += 1
            release.wait(timeout=HOLD_LIMIT_S)
        return Answer(204)

    env = system_env(
        database_url=fresh_database,
        redis_url=private_redis.url,
        llm_url=fake_llm.base_url,
        DRIFTLESS_WEBHOOK_ALLOW_PRIVATE="true",  # the receiver is on 127.0.0.1
        # The worker waits 2 s for an answer: the kill comes well within that. The claim's
        # lease (Policy.lease: past the job's hard time limit, 60 s) is what the test
        # then waits out.
        DRIFTLESS_WEBHOOK_TIMEOUT_S="2",
        DRIFTLESS_WEBHOOK_BACKOFF_S="0.2",
    )
    port = free_port()
    *_, worker = processes.system(env, port, web_workers=1)
    api = Api(port, new_api_key(fresh_database))
    with Receiver() as receiver:
        receiver.answer_with(hold_first_attempts)
        created = api.post(
            "/agents-api/webhooks", {"url": receiver.url, "events": ["facts.changed"]}
        )
        assert created.status == 201, created
        receiver.secret = created.body["secret"]
        webhook_id = created.body["id"]
        for i in range(EVENTS):
            changed = api.call("PUT", "/agents-api/facts?agentId=a&userId=u", {"step": i})
            assert changed.status == 200, changed

        wait_until(lambda: held[0] >= SLOTS_PER_WEBHOOK, timeout=30, what="attempts held")
        worker.kill()
        held_at_kill = held[0]
        assert not worker.alive()
        release.set()  # the held answers go to a dead worker's closed sockets
        processes.worker(env)

        def deliveries() -> list[dict[str, Any]]:
            answer = api.get(f"/agents-api/webhooks/{webhook_id}/deliveries")
            assert answer.status == 200, answer
            return list(answer.body["deliveries"])

        wait_until(
            lambda: sum(d["status"] == "delivered" for d in deliveries()) == EVENTS,
            timeout=150,
            what="every delivery delivered after the kill",
        )
        events = receiver.events()

    settled = deliveries()
    assert {d["eventId"] for d in settled} == set(events)
    assert sorted(event["data"]["facts"]["step"] for event in events.values()) == list(
        range(EVENTS)
    )
    again = sum(d["attempts"] > 1 for d in settled)
    assert again >= held_at_kill  # each attempt the kill cut short was made again
    report(
        f"webhook kill -9: {held_at_kill} attempts awaiting their answer at the kill;"
        f" {EVENTS} events,"
        f" all delivered ({again} after a second attempt), {len(receiver.requests)} requests"
        " received, each event kept once by webhook-id"
    )
