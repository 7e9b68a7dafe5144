"""The Redis primary killed (kill -9) under load, with Sentinel promoting its replica ([4.2]).

REDIS_URL (and so the broker) is a redis+sentinel:// URL: web, worker and beat ask the
sentinels for the primary, and follow the promoted replica without a restart. What was
in flight in Redis when the primary died (a job, a debounce) comes back from PostgreSQL
through the reconciler.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.faults.conftest import report
from tests.faults.db import org_of, topics_of, written_by_trigger
from tests.faults.load import Load
from tests.faults.procs import Processes, wait_until
from tests.faults.sentinel import SentinelCluster, machine_redis_server
from tests.faults.test_redis_restart import POSTERS, lost_messages, poster, system_under_load
from tests.llm_server import FakeOpenAI

BEFORE_S, AFTER_S = 2.0, 2.0
# The bound: the service answers again (a Redis-backed read succeeds) this soon.
ANSWERS_AGAIN_S = 15.0
# The load leaves a backlog (hundreds of tickets, the reconciler's resends among them) that
# one worker of 16 greenlets drains on two shared cores in 20-40 s: 20.1-40.3 s over four
# runs on this code and 28.2-40.3 s over four on 89efeaf (2026-12-07), so the 40 s this
# waited was the edge, and CI failed on it. The assertion is that nothing is lost; the time
# is the backlog's, and the report line says it.
DRAIN_S = 120.0


@pytest.mark.faults
def test_sentinel_failover_under_load_loses_nothing_and_answers_within_15_s_42(
    processes: Processes, fresh_database: str, fake_llm: FakeOpenAI
) -> None:
    cluster = SentinelCluster(processes, machine_redis_server()).start()
    api, (web, beat, worker) = system_under_load(
        processes, database_url=fresh_database, redis_url=cluster.url, fake_llm=fake_llm
    )
    probe = api.new_session(agent="probe")["id"]
    old_primary = cluster.master_port()

    load = Load(poster(api), POSTERS)
    load.start()
    try:
        time.sleep(BEFORE_S)
        wait_until(lambda: fake_llm.in_flight > 0, timeout=10, what="an LLM call in flight")
        cluster.kill_primary()
        killed = time.monotonic()
        # The context needs the working memory, which only Redis holds: it answering
        # 200 again is the service answering again.
        wait_until(
            lambda: api.get(f"/agents-api/sessions/{probe}/context").status == 200
            and cluster.master_port() != old_primary,
            timeout=ANSWERS_AGAIN_S, interval=0.2, what="the service answering after the failover",
        )  # fmt: skip
        answered_s = time.monotonic() - killed
        time.sleep(AFTER_S)
    finally:
        load.stop()
    assert cluster.master_port() == cluster.replica_port

    calls = load.calls
    unanswered = [c for c in calls if c.answer.status == 0]
    # Only a Redis-backed read may fail, and only with the contract's 503.
    server_errors = [c for c in calls if c.answer.status >= 500 and c.answer.status != 503]
    assert not unanswered and not server_errors, (unanswered + server_errors)[:5]

    messages = load.of("message")
    assert all(c.answer.status == 201 for c in messages)
    assert all(c.answer.status == 201 for c in load.of("close"))
    org = org_of(fresh_database, api.key)
    lost, _ = lost_messages(fresh_database, org, messages)
    assert not lost

    # The same processes carry on with the promoted replica; every closed topic,
    # including those whose job died with the primary, is summarized.
    session = api.new_session(agent="after-failover")
    assert api.post_message(session["id"], "After the failover").status == 201
    final = uuid.UUID(session["activeTopicId"])
    assert api.close_topic(session["id"]).status == 201
    closed = [t.id for t in topics_of(fresh_database, org) if t.status == "closed"]
    assert final in closed
    draining = time.monotonic()
    wait_until(
        lambda: all(t.summarized for t in topics_of(fresh_database, org) if t.id in closed),
        timeout=DRAIN_S, interval=0.5, what="every closed topic summarized after the failover",
    )  # fmt: skip
    drained_s = time.monotonic() - draining
    assert web.alive() and beat.alive() and worker.alive(), worker.tail()
    assert str(final) in worker.output()  # its job went through the promoted replica
    assert len([c for c in processes.children if c.name == "worker"]) == 1  # never restarted
    reconciled = written_by_trigger(fresh_database, org)["reconcile"]
    unavailable = sum(c.answer.status == 503 for c in calls)
    report(
        f"Sentinel failover under load ({POSTERS} clients, primary killed -9): answering"
        f" again {answered_s:.1f} s after the kill; {len(messages)} message posts all 201,"
        f" {len(lost)} lost; {unavailable} reads answered 503 meanwhile; {len(closed)} closed"
        f" topics all summarized ({reconciled} by the reconciler) {drained_s:.0f} s after the"
        f" load; worker never restarted"
    )
