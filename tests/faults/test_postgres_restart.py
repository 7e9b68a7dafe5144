"""PostgreSQL stopped and started again under the same web and worker processes.

While it is down every request that needs it answers 503 with the contract's error
shape (never a 500, never a hang) and /readyz says which dependency is missing; once
it is back on the same port the same processes serve again (the idle ping replaces
the dead connections) and the worker finishes the summary it was writing when the
database went away (its task retries; the reconciler would re-enqueue it anyway).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial

import psutil
import pytest

from shared.infra.db.migrate import upgrade
from tests import services
from tests.faults.conftest import new_api_key, report
from tests.faults.db import messages_of, org_of, topics_of
from tests.faults.http import Api, is_unavailable
from tests.faults.load import Fault, Load
from tests.faults.procs import (
    PrivatePostgres,
    PrivateRedis,
    Processes,
    free_port,
    system_env,
    wait_until,
)
from tests.llm_server import FakeOpenAI, Reply

CLIENTS = 3
OUTAGE_S = 3.0
AFTER_S = 2.0
LLM_DELAY_S = 1.5  # the worker is inside this call when PostgreSQL stops
SUMMARY = '{"title": "Restart", "summary": "Survived a restart.", "include_in_memory": false}'


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.init().start()
        yield server
    finally:
        server.close()


def client(api: Api) -> Callable[[Load, int], None]:
    """Each client posts to its own session, reads it back and sends exit triggers."""

    def run(load: Load, n: int) -> None:
        sid = api.new_session(agent=f"client-{n}")["id"]
        i = 0
        while not load.stopping.is_set():
            i += 1
            content = f"message {i} {uuid.uuid4().hex[:8]}"
            load.call("POST messages", partial(api.post_message, sid, content), content)
            load.call("GET session", partial(api.get, f"/agents-api/sessions/{sid}"))
            if i % 3 == 0:
                load.call("POST evaluate", partial(api.evaluate, sid))
            time.sleep(0.02)

    return run


def gunicorn_workers(master_pid: int) -> set[int]:
    return {child.pid for child in psutil.Process(master_pid).children()}


@pytest.mark.faults
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_answers_503_meanwhile_and_the_same_processes_recover(
    mode: str,
    processes: Processes,
    private_postgres: PrivatePostgres,
    private_redis: PrivateRedis,
    fake_llm: FakeOpenAI,
) -> None:
    database_url = services.recreate_database(private_postgres.admin_url, "driftless")
    upgrade(database_url)
    fake_llm.answer_with(lambda body: Reply(SUMMARY, delay_s=LLM_DELAY_S))
    env = system_env(
        database_url=database_url,
        redis_url=private_redis.url,
        llm_url=fake_llm.base_url,
    )
    port = free_port()
    web, beat, worker = processes.system(env, port)
    web_workers = gunicorn_workers(web.pid)
    key = new_api_key(database_url)
    api = Api(port, key, timeout_s=20)
    org = org_of(database_url, key)

    # A topic whose summary is being written (the LLM call in flight) when PG stops.
    session = api.new_session(agent="in-flight")
    for i in range(3):
        assert api.post_message(session["id"], f"before the restart {i}").status == 201
    in_flight_topic = uuid.UUID(session["activeTopicId"])
    assert api.close_topic(session["id"]).status == 201
    wait_until(lambda: fake_llm.in_flight > 0, timeout=20, what="the summary call in flight")

    fault = Fault()
    load = Load(client(api), CLIENTS)
    load.start()
    try:
        time.sleep(1.0)
        fault.begin()
        private_postgres.stop(mode)
        time.sleep(OUTAGE_S / 2)
        ready_down, healthy_down = api.get("/readyz"), api.get("/healthz")
        time.sleep(OUTAGE_S / 2)
        private_postgres.start()  # same data directory, same port; returns once it accepts
        fault.end()
        time.sleep(AFTER_S)
    finally:
        load.stop()
    ready_up = api.get("/readyz")

    calls = load.calls
    before = [c for c in calls if fault.phase(c) == "before"]
    outage = [c for c in calls if fault.phase(c) == "during"]
    after = [c for c in calls if fault.phase(c) == "after"]
    database_down = partial(is_unavailable, dependency="database")
    assert before and all(c.answer.ok for c in before), [c for c in before if not c.answer.ok][:3]
    # Down: a 2xx (a request that got in just before) or the contract's 503; no 500s,
    # and every request answered before the client's timeout.
    assert all(c.answer.ok or database_down(c.answer) for c in outage), [
        c for c in outage if not (c.answer.ok or database_down(c.answer))
    ][:3]
    unavailable = Counter(c.kind for c in outage if c.answer.status == 503)
    assert sum(unavailable.values()) >= CLIENTS, unavailable
    assert ready_down.status == 503 and ready_down.body["checks"]["database"] != "ok"
    assert ready_down.body["checks"]["redis"] == "ok"
    assert healthy_down.status == 200  # liveness must not fail: a restart would not help

    # Back: the same processes serve again at once.
    assert ready_up.status == 200, ready_up
    assert after and all(c.answer.ok for c in after), [c for c in after if not c.answer.ok][:3]
    assert web.alive() and worker.alive() and beat.alive()
    assert gunicorn_workers(web.pid) == web_workers  # no gunicorn worker was replaced
    assert len([c for c in processes.children if c.name == "worker"]) == 1

    # Every message answered 201 is there: committed means durable, even after a crash.
    stored = messages_of(database_url, org)
    acknowledged = {c.answer.body["id"]: c.content for c in load.of("POST messages") if c.answer.ok}
    lost = [
        mid for mid, content in acknowledged.items() if stored.get(mid, (None, ""))[1] != content
    ]
    assert not lost

    # The summary cut off by the outage, and one of a topic closed now, both get written.
    session_after = api.new_session(agent="after")
    assert api.post_message(session_after["id"], "After the restart").status == 201
    new_topic = uuid.UUID(session_after["activeTopicId"])
    assert api.close_topic(session_after["id"]).status == 201

    def summarized() -> bool:
        topics = {t.id: t for t in topics_of(database_url, org)}
        return topics[in_flight_topic].summarized and topics[new_topic].summarized

    wait_until(summarized, timeout=60, interval=0.5, what="both summaries after the restart")
    assert worker.alive()

    report(
        f"PostgreSQL stopped ({mode}) {OUTAGE_S:g} s under {CLIENTS} clients:"
        f" {len(outage)} requests meanwhile, {sum(unavailable.values())} answered 503 'unavailable'"
        f" ({', '.join(f'{route} {n}' for route, n in sorted(unavailable.items()))}),"
        f" {sum(c.answer.ok for c in outage)} 2xx, 0 answered 500 or hung;"
        f" after the restart {len(after)} requests all 2xx from the same web (pid {web.pid})"
        f" and worker (pid {worker.pid}); {len(acknowledged)} messages acknowledged, {len(lost)}"
        " lost; the summary in flight at the stop and a new one both written"
    )
