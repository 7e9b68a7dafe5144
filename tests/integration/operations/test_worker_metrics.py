"""The worker's own metrics endpoint and logs, from a real `celery -A worker.main worker`
subprocess: prefork children's counts are summed by the main process (multiprocess mode),
the threads pool works the same, beat serves nothing, and task log lines are JSON with
task_id and topic_id bound.

The subprocess consumes a queue of its own (the summary job is routed to it by name), so
no other worker of the test run can take the job it must run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import SUMMARIZE_TOPIC, CeleryJobQueue, Job, RecordingQueue
from tests.helpers import new_session, post_message, scrape, wait_for
from worker.app import make_celery
from worker.metrics import QueueDepthCollector

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def process_env(settings: Settings, port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": str(settings.database_url),
        "REDIS_URL": str(settings.redis_url),
        "CELERY_BROKER_URL": str(settings.broker_url),
        "DRIFTLESS_LLM": "local",
        "DRIFTLESS_WORKER_METRICS_PORT": str(port),
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
        # Beat's jobs must not fire while a test looks at it.
        "DRIFTLESS_RECONCILE_S": "3600",
        "DRIFTLESS_SWEEP_S": "3600",
        "DRIFTLESS_RETENTION_SWEEP_S": "3600",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # the worker must make its own
    return env


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)  # warm shutdown: atexit clean-up runs
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def json_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    for line in path.read_text().splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:  # a warning printed by a library, say
            continue
        if isinstance(parsed, dict):
            lines.append(parsed)
    return lines


@dataclass
class WorkerProcess:
    port: int
    queue: str
    log: Path
    process: subprocess.Popen[bytes]

    def multiprocess_dir(self) -> Path:
        [line] = [
            line for line in json_lines(self.log) if line["message"].startswith("worker metrics on")
        ]
        return Path(line["message"].rsplit("PROMETHEUS_MULTIPROC_DIR=", 1)[1].rstrip(")"))


@pytest.fixture(params=["prefork", "threads"])
def worker_process(request: Any, settings: Settings, tmp_path: Path) -> Iterator[WorkerProcess]:
    port, queue = free_port(), f"metrics-probe-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [
                str(BIN / "celery"), "-A", "worker.main", "worker", "--queues", queue,
                "--pool", request.param, "--concurrency", "2",
                "--hostname", f"{queue}@%h", "--without-gossip", "--without-mingle",
            ],
            cwd=REPO, env=process_env(settings, port), stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    worker = WorkerProcess(port, queue, log, process)
    try:

        def serving() -> bool | None:
            assert process.poll() is None, log.read_text()
            try:
                scrape(port)
            except (urllib.error.URLError, ConnectionError):
                return None
            # Serving before the pool consumes: wait for the consumer too.
            return any("ready." in line["message"] for line in json_lines(log)) or None

        wait_for(serving, timeout=60, what="the worker's metrics endpoint")
        yield worker
    finally:
        stop(process)


@pytest.fixture
def probe_app(settings: Settings, worker_process: WorkerProcess) -> Celery:
    """Our Celery app, routing summaries to the probe worker's queue."""
    app = make_celery(settings)
    app.conf.task_routes = {SUMMARIZE_TOPIC: {"queue": worker_process.queue}}
    return app


@pytest.fixture
def closed_topic(settings: Settings, committed_factory: sessionmaker[Session]) -> tuple[str, Job]:
    """A committed, closed topic and the summary job its closing asked for."""
    from tests.conftest import new_key
    from web.app import create_app

    queue = RecordingQueue()
    client = create_app(settings, queue=queue, session_factory=committed_factory).test_client()
    auth = {"Authorization": f"Bearer {new_key(committed_factory)}"}
    session = new_session(client, auth)
    for i, content in enumerate(["We decided to ship on Friday.", "Friday it is."] * 3):
        post_message(client, auth, session["id"], content, role=("user", "assistant")[i % 2])
    client.post(f"/agents-api/sessions/{session['id']}/topics", headers=auth)
    [job] = [job for job in queue.sent if job.task == SUMMARIZE_TOPIC]
    return session["activeTopicId"], job


def test_the_worker_serves_task_lag_and_llm_metrics_of_all_its_processes(
    worker_process: WorkerProcess, probe_app: Celery, closed_topic: tuple[str, Job]
) -> None:
    topic_id, job = closed_topic
    task = {"task": SUMMARIZE_TOPIC}
    lag = {"queue": worker_process.queue}
    llm = {"model": "local-extractive-v1", "purpose": "summarize", "outcome": "ok"}
    before = scrape(worker_process.port)

    CeleryJobQueue(probe_app).send(job)

    def moved(name: str, labels: dict[str, str], by: float = 1) -> Any:
        def probe() -> dict[Any, float] | None:
            now = scrape(worker_process.port)
            return now if value(now, name, **labels) - value(before, name, **labels) >= by else None

        return probe

    # task_postrun (the duration) comes after task_success (the count): wait for the last.
    after = wait_for(moved("driftless_task_seconds_count", task), what="the summary job")
    assert (
        value(after, "driftless_jobs_succeeded_total", **task)
        - value(before, "driftless_jobs_succeeded_total", **task)
        == 1
    )
    assert value(after, "driftless_jobs_failed_total", **task) == 0
    assert value(after, "driftless_queue_lag_seconds_count", **lag) == 1
    assert value(after, "driftless_task_seconds_count", **task) == 1
    # The summary's LLM call happened in a pool process; the main process serves it.
    assert value(after, "driftless_llm_calls_total", **llm) == 1

    # Lag runs from when a job is due: a countdown is not lag.
    countdown = 3.0
    CeleryJobQueue(probe_app).send(Job(job.task, job.kwargs, countdown=countdown))
    before = after
    after = wait_for(moved("driftless_task_seconds_count", task), what="the delayed job")
    assert value(after, "driftless_queue_lag_seconds_count", **lag) == 2
    delayed_lag = value(after, "driftless_queue_lag_seconds_sum", **lag) - value(
        before, "driftless_queue_lag_seconds_sum", **lag
    )
    assert 0 <= delayed_lag < countdown

    # Its log lines are JSON, with the task's ids bound.
    lines = [line for line in json_lines(worker_process.log) if line.get("topic_id") == topic_id]
    task_ids = {line.get("task_id") for line in lines if line["logger"] == "worker.tasks"}
    assert len(task_ids) == 2 and None not in task_ids  # one per job run
    assert any(
        line["logger"] == "celery.app.trace" and "succeeded" in line["message"] for line in lines
    )
    # Outside a task nothing is bound.
    ready = [line for line in json_lines(worker_process.log) if "ready." in line["message"]]
    assert ready and "task_id" not in ready[0]


def test_the_worker_removes_its_private_metrics_directory_on_exit(
    worker_process: WorkerProcess,
) -> None:
    directory = worker_process.multiprocess_dir()
    assert directory.is_dir()
    stop(worker_process.process)
    assert worker_process.process.returncode == 0
    assert not directory.exists()


def test_beat_serves_no_metrics(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "beat.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [str(BIN / "celery"), "-A", "worker.main", "beat",
             "--schedule", str(tmp_path / "schedule")],
            cwd=REPO, env=process_env(settings, port), stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    try:
        wait_for(
            lambda: any("Starting" in line["message"] for line in json_lines(log)) or None,
            timeout=60,
            what="beat to start",
        )
        # A worker listens before it starts consuming (celeryd_init); beat has started.
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
            pass
    finally:
        stop(process)


def test_a_killed_workers_private_directory_is_removed_by_the_next_worker() -> None:
    from worker.multiproc import PRIVATE_DIR_PREFIX, remove_orphaned_dirs

    finished = subprocess.Popen(["true"])
    finished.wait()  # its pid names a process that is gone, like a worker killed with -9
    orphan = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_DIR_PREFIX}{finished.pid}-"))
    alive = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_DIR_PREFIX}{os.getpid()}-"))
    try:
        remove_orphaned_dirs()
        assert not orphan.exists() and alive.is_dir()
    finally:
        shutil.rmtree(orphan, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)


def test_queue_depth_is_the_length_of_each_queues_list(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    busy, idle = (f"depth-probe-{uuid.uuid4().hex[:8]}" for _ in range(2))
    client.rpush(busy, "job-1", "job-2", "job-3")
    try:
        [gauge] = QueueDepthCollector(client, [busy, idle]).collect()
        assert {s.labels["queue"]: s.value for s in gauge.samples} == {busy: 3, idle: 0}
    finally:
        client.delete(busy)


def test_without_the_broker_a_scrape_still_answers_without_queue_depth() -> None:
    unreachable = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    registry = CollectorRegistry()
    registry.register(QueueDepthCollector(unreachable, ["llm", "fast"]))
    assert b"driftless_queue_depth" not in generate_latest(registry)
