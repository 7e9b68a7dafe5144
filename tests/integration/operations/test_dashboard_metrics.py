"""Every metric the Grafana dashboard and the alert rules in deploy/ name is one the
service exports: the real web (gunicorn, as the Procfile runs it) and a real Celery
worker with its metrics port, on a database and a Redis of this test alone, after a
little real work, scraped and parsed as Prometheus would.

The work: a topic closed while no worker runs, its summary's ticket lost from the broker
(as a restart without persistence loses it) and topped up by the reconciler; the summary's
LLM call answers an unusable JSON (a counted fallback); an exit trigger debounced and
fired; a user's promotion. With the fault suite's process helpers (tests/faults/procs.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from celery import Celery

from shared.infra.broker import sender_settings
from shared.infra.db.migrate import upgrade
from shared.infra.queue import (
    LLM_QUEUE,
    QUEUES,
    RECONCILE,
    SUMMARIZE_TOPIC,
    CeleryJobQueue,
    Job,
)
from shared.infra.runtime import Endpoints
from tests import services
from tests.dashboards import STANDARD_SERIES, dashboard_expressions, metric_names, rule_expressions
from tests.faults.conftest import new_api_key
from tests.faults.http import Api
from tests.faults.procs import PrivateRedis, Processes, driftless_env, free_port
from tests.helpers import Samples, scrape, wait_for
from tests.llm_server import FakeOpenAI

DATABASE = f"{services.TEST_DATABASE}_dashboards"
RECONCILE_GRACE_S = 1  # DRIFTLESS_RECONCILE_S: closed longer ago than this counts as lost


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@dataclass(frozen=True)
class System:
    processes: Processes
    database_url: str
    broker: PrivateRedis
    env: dict[str, str]
    web_port: int
    worker_port: int


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    processes = Processes(tmp_path)
    admin = services.admin_database_url()
    try:
        broker = PrivateRedis(processes).start()
        database_url = services.recreate_database(admin, DATABASE)
        upgrade(database_url)
        with FakeOpenAI() as llm:  # answers `{}`: an unusable summary
            env = driftless_env(
                DATABASE_URL=database_url,
                REDIS_URL=broker.url,
                CELERY_BROKER_URL=broker.url,
                DRIFTLESS_LLM="openai",
                OPENAI_API_KEY="test",
                OPENAI_BASE_URL=llm.base_url,
                DRIFTLESS_DEBOUNCE_MS="200",
                # The reconciler's grace: a topic closed a second ago counts as lost.
                DRIFTLESS_RECONCILE_S=str(RECONCILE_GRACE_S),
            )
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # each process gets its own below
            yield System(processes, database_url, broker, env, free_port(), free_port())
    finally:
        processes.close()
        services.drop_database(admin, DATABASE)


def test_every_metric_the_dashboard_and_the_alerts_name_is_exported(system: System) -> None:
    # The web as the image runs it: one metrics directory summing both gunicorn workers.
    web_metrics = system.processes.directory / "web-metrics"
    web_metrics.mkdir()
    system.processes.web(
        {**system.env, "PROMETHEUS_MULTIPROC_DIR": str(web_metrics)}, system.web_port
    )
    api = Api(system.web_port, new_api_key(system.database_url))

    # A closed topic whose summary job Redis then loses: no worker has taken it yet.
    session = api.new_session()
    for i, text in enumerate(["We ship the billing stack on Friday.", "Friday it is."] * 3):
        assert api.post_message(session["id"], text, role=("user", "assistant")[i % 2]).ok
    closed_topic = session["activeTopicId"]
    assert api.close_topic(session["id"]).ok
    closed_at = time.monotonic()
    broker = redis.Redis.from_url(system.broker.url)
    assert broker.llen(LLM_QUEUE) >= 1
    broker.delete(LLM_QUEUE)

    system.processes.worker(
        {**system.env, "DRIFTLESS_WORKER_METRICS_PORT": str(system.worker_port)}, concurrency=4
    )
    time.sleep(max(0.0, closed_at + RECONCILE_GRACE_S + 0.5 - time.monotonic()))
    sender = Celery("dashboard-test", set_as_current=False)
    sender.conf.update(
        sender_settings(Endpoints(system.database_url, system.broker.url, system.broker.url))
    )
    try:
        CeleryJobQueue(sender).send(Job(RECONCILE))
    finally:
        sender.close()

    # One summary job runs: its ticket alone was lost, and it waited in its org's list
    # (shared/infra/fair.py), marked held there, so the reconciler sent no second job but
    # a ticket (its job had waited past DRIFTLESS_RECONCILE_S with none in the broker).
    # Scraped once it ran, so the counts are exact.
    def summarized() -> Samples | None:
        samples = scrape(system.worker_port)
        done = value(samples, "driftless_jobs_succeeded_total", task=SUMMARIZE_TOPIC)
        return samples if done == 1 else None

    worker = wait_for(summarized, timeout=60, what="the summary whose ticket was lost")
    assert value(worker, "driftless_reconcile_recovered_total", kind="tickets") == 1
    assert value(worker, "driftless_reconcile_recovered_total", kind="summaries") == 0
    assert value(worker, "driftless_fallbacks_total", call="summarize", reason="unusable_answer")
    # It waited in the live lane (driftless_job_wait_seconds{lane}), and nothing else.
    assert value(worker, "driftless_job_wait_seconds_count", lane="live") == 1
    # Known tasks start at 0, so an alert on increase() sees their first failure.
    assert value(worker, "driftless_jobs_failed_total", task=SUMMARIZE_TOPIC) == 0

    # An exit trigger, debounced in the web and fired by the worker; a user's promotion.
    other = api.new_session(user="user-2")
    assert api.post_message(other["id"], "Let's plan the hike.").ok
    assert api.evaluate(other["id"], "visibility").body["status"] == "scheduled"
    promoted = api.call("PUT", f"/agents-api/topics/{closed_topic}/memory", {"state": "promoted"})
    assert promoted.ok, promoted

    def fired() -> Samples | None:
        samples = scrape(system.worker_port)
        return samples if value(samples, "driftless_debounce_fires_total", status="fire") else None

    worker = wait_for(fired, timeout=30, what="the debounce fire job")
    web = scrape(system.web_port)
    assert value(web, "driftless_memory_changes_total", change="promoted", actor="user") == 1
    for queue in QUEUES:  # every queue the worker consumes
        assert value(worker, "driftless_queue_depth", queue=queue) is not None

    exported = {name for name, _ in web} | {name for name, _ in worker}
    missing = {
        f"{source}: {name}"
        for source, expr in dashboard_expressions() + rule_expressions()
        for name in metric_names(expr) - exported - STANDARD_SERIES
    }
    assert not missing, sorted(missing)
    assert os.listdir(web_metrics)  # the web's scrape was the multiprocess sum
