"""Set-up shared by the benchmarks: a fresh, migrated database and a Redis of their own.

Two runs side by side pick different ones with DRIFTLESS_BENCH_DATABASE and
DRIFTLESS_BENCH_REDIS_DB (the broker takes the database below it, as in the tests, or
DRIFTLESS_BENCH_BROKER_DB). A bench empties its Redis databases only when they are empty
or a bench's already (they carry OWNER_KEY); it refuses one holding anybody else's keys.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import create_api_key, org_for_key
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.migrate import upgrade
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from tests import services

BENCH_DATABASE = os.environ.get("DRIFTLESS_BENCH_DATABASE", "driftless_bench")
BENCH_REDIS_DB = int(os.environ.get("DRIFTLESS_BENCH_REDIS_DB", "11"))
BENCH_BROKER_DB = int(os.environ.get("DRIFTLESS_BENCH_BROKER_DB", str(BENCH_REDIS_DB - 1)))
BIN = Path(sys.executable).parent
# Marks a Redis database as the benches'. Flushing is how a bench starts clean, and a
# database without this key may be someone's running system or test run.
OWNER_KEY = "driftless:bench:owner"
# Atomic, so that nothing lands between the check and the flush: empty the database and
# mark it, if it is empty or marked already; else touch nothing.
_FLUSH_OWN = """
if redis.call('DBSIZE') > 0 and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('FLUSHDB')
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""
# What the tests' scripted model answers to a summary request (shared/llm/prompts.py).
SUMMARY_ANSWER = (
    '{"title": "Billing stack", "summary": "Billing stack (PostgreSQL, Celery on Redis);'
    ' deadline Friday.", "include_in_memory": true}'
)


@dataclass
class BenchEnv:
    database_url: str
    redis_url: str
    engine: Engine
    session_factory: sessionmaker[Session]
    redis: redis.Redis
    org_key: str
    broker_url: str
    # Added to every web and worker subprocess's environment (e.g. the embeddings' settings).
    environment: dict[str, str] = field(default_factory=dict)

    def uow(self) -> UnitOfWork:
        return UnitOfWork(self.session_factory, RecordingQueue())

    def org_id(self) -> uuid.UUID:
        with self.uow() as uow:
            org_id = org_for_key(uow=uow, key=self.org_key)
        assert org_id is not None
        return org_id

    def flush_redis(self) -> None:
        """Empty the bench's data database (still marked as the bench's)."""
        flush_own(self.redis_url)

    def flush_broker(self) -> None:
        """Empty the bench's broker database: jobs no worker will run."""
        flush_own(self.broker_url)

    def process_environment(self, **extra: str) -> dict[str, str]:
        """The environment of a web or worker subprocess on the bench's servers."""
        return {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "CELERY_BROKER_URL": self.broker_url,
            "DRIFTLESS_LLM": "local",
            "DRIFTLESS_WORKER_METRICS_PORT": "0",  # no port clash with other runs
            "LOG_FORMAT": "text",
            "LOG_LEVEL": "WARNING",
            **self.environment,
            **extra,
        }


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--admin-database-url",
        default=None,
        help="PostgreSQL to create the bench database on (default: 127.0.0.1, else embedded)",
    )
    return parser


def _use_admin_url(admin_url: str | None) -> None:
    if admin_url:
        os.environ["TEST_DATABASE_URL"] = admin_url


def flush_own(url: str) -> None:
    """Empty the Redis database at `url` and mark it as the benches'; exit, touching
    nothing, when it holds keys no bench wrote."""
    client = redis.Redis.from_url(url)
    if not client.eval(_FLUSH_OWN, 1, OWNER_KEY, "driftless benchmarks"):
        db = client.connection_pool.connection_kwargs.get("db", 0)
        raise SystemExit(
            f"bench: Redis database {db} ({url}) holds keys no benchmark wrote (no"
            f" {OWNER_KEY} key), and a bench flushes only its own. Choose an empty database"
            f" with DRIFTLESS_BENCH_REDIS_DB (data, now {BENCH_REDIS_DB}) and"
            f" DRIFTLESS_BENCH_BROKER_DB (broker, now {BENCH_BROKER_DB}), or another server"
            " with TEST_REDIS_URL."
        )


def bench_env(admin_url: str | None) -> BenchEnv:
    _use_admin_url(admin_url)
    redis_url = f"{services.redis_base_url()}/{BENCH_REDIS_DB}"
    broker_url = f"{services.redis_base_url()}/{BENCH_BROKER_DB}"
    for url in (redis_url, broker_url):  # before the database: a refusal changes nothing
        flush_own(url)
    database_url = services.recreate_database(services.admin_database_url(), BENCH_DATABASE)
    upgrade(database_url)
    client = redis.Redis.from_url(redis_url)
    engine = make_engine(database_url)
    factory = make_session_factory(engine)
    with UnitOfWork(factory, RecordingQueue()) as uow:
        key = create_api_key(uow=uow, org_name=f"bench-{uuid.uuid4().hex[:8]}")
        uow.commit()
    return BenchEnv(database_url, redis_url, engine, factory, client, key, broker_url)


def reused_bench_env(admin_url: str | None) -> BenchEnv:
    """The database and Redis a previous run left, as they are, and a new key of its org."""
    _use_admin_url(admin_url)
    database_url = (
        make_url(services.admin_database_url())
        .set(database=BENCH_DATABASE)
        .render_as_string(hide_password=False)
    )
    engine = make_engine(database_url)
    factory = make_session_factory(engine)
    with UnitOfWork(factory, RecordingQueue()) as uow:
        org = uow.session.scalars(text("SELECT name FROM orgs")).one()
        key = create_api_key(uow=uow, org_name=org)
        uow.commit()
    redis_url = f"{services.redis_base_url()}/{BENCH_REDIS_DB}"
    broker_url = f"{services.redis_base_url()}/{BENCH_BROKER_DB}"
    client = redis.Redis.from_url(redis_url)
    return BenchEnv(database_url, redis_url, engine, factory, client, key, broker_url)


def machine() -> str:
    """One line naming the machine the numbers come from."""
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cpuinfo = Path("/proc/cpuinfo")
    names = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((n.split(":", 1)[1].strip() for n in names if n.startswith("model name")), "")
    load = os.getloadavg()[0]  # others' work on the machine skews the numbers; say so
    return (
        f"{os.cpu_count()} CPUs ({model or platform.processor()}), {memory_gib:.0f} GiB RAM,"
        f" Python {platform.python_version()}, load average {load:.2f} at the start"
    )


@dataclass
class Subprocess:
    process: subprocess.Popen[bytes]
    log: Path  # its stderr, read when it dies early

    def check_alive(self, what: str) -> None:
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"{what} exited ({self.process.returncode}):\n{tail}")


@contextlib.contextmanager
def subprocess_running(
    command: list[str], environment: dict[str, str], *, cwd: Path | None = None
) -> Iterator[Subprocess]:
    """A web or worker process for the duration (in `cwd`: another checkout's web runs in
    its own tree); stopped (SIGTERM, then SIGKILL) by its pid.

    Its stderr goes to a file, never a pipe: a pipe nobody reads would block it once full.
    """
    with tempfile.NamedTemporaryFile(prefix="bench-", suffix=".log", delete=False) as log:
        process = subprocess.Popen(
            command, env=environment, cwd=cwd, stdout=subprocess.DEVNULL, stderr=log
        )
    running = Subprocess(process, Path(log.name))
    try:
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        running.log.unlink(missing_ok=True)


def wait_until(
    ready: Callable[[], bool], *, timeout_s: float, what: str, process: Subprocess | None = None
) -> None:
    """Poll `ready` until it holds; fail with the subprocess's stderr if it died first."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if process is not None:
            process.check_alive(what)
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not ready after {timeout_s:.0f} s")
        time.sleep(0.1)


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def describe(samples_ms: list[float]) -> str:
    return (
        f"p50 {percentile(samples_ms, 0.5):7.2f} ms   p95 {percentile(samples_ms, 0.95):7.2f} ms"
        f"   mean {statistics.fmean(samples_ms):7.2f} ms   n={len(samples_ms)}"
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process and all its descendants have used so far."""
    root = psutil.Process(pid)
    times = [p.cpu_times() for p in [root, *root.children(recursive=True)]]
    return sum(t.user + t.system for t in times)
