"""bench/worker_pool (P4): summaries per second of an `llm` worker against an LLM that
takes 1 s a call, for several pool configurations, against the ideal concurrency ÷ latency.
The default configurations put the old worker (threads, 16) beside the Procfile's
(gevent) at 128 and 256 greenlets, in one run.

For each configuration: N = rounds x concurrency closed topics are prepared (a session,
six messages, the topic closed by opening the next one; their SUMMARIZE_TOPIC jobs are
held back), then a real `celery -A worker.main worker --queues llm` subprocess starts
with that pool and first summarizes one untimed warm-up topic per pool slot; then the
jobs are sent to the real Redis broker, and the time runs from the first send to the
last summary written (the audit rows' finish time, after polling
topics.summarized_through_id until every topic has one). The LLM is the tests'
OpenAI-compatible server (tests/llm_server.py) in this process, answering a valid
summary after `--latency` seconds, reached through the real `openai` client
(DRIFTLESS_LLM=openai). The worker sizes its own database pool (worker/context.py), as
in production. The memory columns are the RSS and the PSS (shared pages split among the
processes that share them) of the worker's process tree after the run; the CPU column
is the worker's CPU time (user + system) per summary over the timed part: the cost that
bounds a large pool's rate on a busy host.

    .venv/bin/python -m bench.worker_pool [--configs threads:16 gevent:128 ...] [--rounds 12]

A configuration is `<pool>[:<concurrency>[:<prefetch multiplier>]]`; the default
concurrency is the CPU count, as Celery's, and the default prefetch multiplier the
app's (1, worker/app.py). The last line is machine-readable (`key=value` pairs per config).
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from dataclasses import dataclass

import psutil
from celery import Celery
from sqlalchemy import func, select

from bench.common import (
    BIN,
    SUMMARY_ANSWER,
    BenchEnv,
    Subprocess,
    arguments,
    bench_env,
    cpu_seconds,
    machine,
    subprocess_running,
    wait_until,
)
from shared.evaluations.models import Evaluation
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import LLM_QUEUE, SUMMARIZE_TOPIC, CeleryJobQueue, Job, RecordingQueue
from shared.sessions.service import create_session, open_topic, post_message
from shared.topics.models import Topic
from tests.llm_server import FakeOpenAI
from worker.app import make_celery

TURNS = [
    ("user", "Let's settle the stack for the billing service before Friday."),
    ("assistant", "Options: PostgreSQL or MongoDB for storage, Celery or cron for jobs."),
    ("user", "We decided to use PostgreSQL; invoices need transactions and joins."),
    ("assistant", "Agreed. PostgreSQL it is, with Alembic for migrations."),
    ("user", "Celery with Redis for the retries. Never run cron on the web hosts."),
    ("assistant", "Noted: Celery on Redis, no cron on web hosts. Deadline Friday."),
]


@dataclass(frozen=True)
class Config:
    pool: str
    concurrency: int
    prefetch: int | None = None  # --prefetch-multiplier; None: the app's (worker/app.py)

    @classmethod
    def parse(cls, text: str) -> Config:
        pool, concurrency, prefetch = [*text.split(":"), "", ""][:3]
        return cls(
            pool,
            int(concurrency) if concurrency else os.cpu_count() or 1,
            int(prefetch) if prefetch else None,
        )

    @property
    def arguments(self) -> list[str]:
        prefetch = [] if self.prefetch is None else ["--prefetch-multiplier", str(self.prefetch)]
        return ["--pool", self.pool, "--concurrency", str(self.concurrency), *prefetch]

    @property
    def label(self) -> str:
        return " ".join(self.arguments)

    @property
    def key(self) -> str:
        return f"{self.pool}{self.concurrency}" + (f"_pf{self.prefetch}" if self.prefetch else "")


@dataclass(frozen=True)
class Result:
    config: Config
    topics: int
    elapsed_s: float
    llm_calls: int
    latency_s: float
    cpu_s: float  # CPU time (user + system) of the worker and its pool processes, timed part
    rss_mib: float  # resident memory of the worker and its pool processes, after the run
    memory_mib: float  # their PSS

    @property
    def rate(self) -> float:
        return self.topics / self.elapsed_s

    @property
    def cpu_ms(self) -> float:
        """CPU per summary, ms: what bounds the rate once the pool is large enough."""
        return 1000 * self.cpu_s / self.topics

    @property
    def ideal(self) -> float:
        return self.config.concurrency / self.latency_s


def closed_topics(env: BenchEnv, count: int) -> list[Job]:
    """`count` topics closed with six messages each; their summary jobs, not yet sent."""
    org_id = env.org_id()
    queue = RecordingQueue()
    with UnitOfWork(env.session_factory, queue) as uow:
        sessions = [
            create_session(uow=uow, org_id=org_id, agent_id="bench", user_id=f"u{i}").session.id
            for i in range(count)
        ]
        for session_id in sessions:
            for role, content in TURNS:
                post_message(
                    uow=uow, org_id=org_id, session_id=session_id, role=role, content=content
                )
        uow.commit()
    # Closed in a transaction of their own, as a client's next request would: the topic
    # rows the posts updated are then read afresh.
    with UnitOfWork(env.session_factory, queue) as uow:
        for session_id in sessions:
            open_topic(uow=uow, org_id=org_id, session_id=session_id, title=None)
        uow.commit()
    jobs = [job for job in queue.sent if job.task == SUMMARIZE_TOPIC]
    assert len(jobs) == count
    return jobs


def summarized(env: BenchEnv, topic_ids: list[uuid.UUID]) -> int:
    with env.uow() as uow:
        done = uow.session.scalar(
            select(func.count()).where(
                Topic.id.in_(topic_ids), Topic.summarized_through_id == Topic.last_message_id
            )
        )
    return int(done or 0)


def last_finish(env: BenchEnv, topic_ids: list[uuid.UUID]) -> dt.datetime:
    with env.uow() as uow:
        finished = uow.session.scalar(
            select(func.max(Evaluation.finished_at)).where(Evaluation.topic_id.in_(topic_ids))
        )
    assert finished is not None
    return finished


def memory_of(pid: int) -> tuple[float, float]:
    """Resident set size and proportional set size (shared pages split among sharers) of
    a process tree, MiB."""
    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
    infos = [p.memory_full_info() for p in processes]
    return sum(i.rss for i in infos) / 2**20, sum(i.pss for i in infos) / 2**20


def worker_answers(app: Celery, name: str) -> bool:
    replies = app.control.ping(destination=[name], timeout=0.5)
    return bool(replies)


def run(
    env: BenchEnv, app: Celery, fake: FakeOpenAI, config: Config, *, rounds: int, latency_s: float
) -> Result:
    warmup = closed_topics(env, config.concurrency)
    jobs = closed_topics(env, rounds * config.concurrency)
    topic_ids = [uuid.UUID(job.kwargs["topic_id"]) for job in jobs]
    name = f"bench-{config.pool}-{config.concurrency}-{uuid.uuid4().hex[:6]}@localhost"
    command = [
        str(BIN / "celery"), "-A", "worker.main", "worker", "--queues", LLM_QUEUE,
        *config.arguments, "--hostname", name,
        "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
    ]  # fmt: skip
    environment = env.process_environment(
        DRIFTLESS_LLM="openai",
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="x",
    )
    with subprocess_running(command, environment) as worker:
        wait_until(lambda: worker_answers(app, name), timeout_s=60, what=name, process=worker)
        queue = CeleryJobQueue(app)
        # One untimed summary per pool slot first: a long-lived worker has its connections,
        # its LLM client and its children's imports done before the work we time.
        send_and_wait(
            env, queue, warmup, worker, what=f"{config.label}: warm-up", per_job_s=latency_s
        )
        calls_before = fake.calls
        cpu_before = cpu_seconds(worker.process.pid)
        started = dt.datetime.now(dt.UTC)
        send_and_wait(
            env, queue, jobs, worker, what=f"{config.label}: summaries", per_job_s=latency_s
        )
        cpu_s = cpu_seconds(worker.process.pid) - cpu_before
        rss_mib, pss_mib = memory_of(worker.process.pid)
    elapsed = (last_finish(env, topic_ids) - started).total_seconds()
    calls = fake.calls - calls_before
    return Result(config, len(jobs), elapsed, calls, latency_s, cpu_s, rss_mib, pss_mib)


def send_and_wait(
    env: BenchEnv,
    queue: CeleryJobQueue,
    jobs: list[Job],
    worker: Subprocess,
    *,
    what: str,
    per_job_s: float,
) -> None:
    """Send the summary jobs, then wait until every one of their topics is summarized."""
    topic_ids = [uuid.UUID(job.kwargs["topic_id"]) for job in jobs]
    for job in jobs:
        queue.send(job)
    wait_until(
        lambda: summarized(env, topic_ids) == len(topic_ids),
        timeout_s=60 + 3 * len(jobs) * per_job_s,  # even one at a time
        what=what,
        process=worker,
    )


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=["threads:16", "gevent:128", "gevent:256"],
        help="<pool>[:<concurrency>[:<prefetch multiplier>]] (concurrency: the CPU count)",
    )
    # A backlog long enough to be a steady state: the first wave of jobs starts at once
    # and the last second only drains: with 4 rounds those were a quarter of the run.
    parser.add_argument("--rounds", type=int, default=12, help="summaries per pool slot")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per LLM call")
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    app = make_celery(
        Settings(database_url=env.database_url, redis_url=env.redis_url, broker_url=env.broker_url)
    )
    results = []
    # Keep-alive, as a real provider: a new connection per call would cost the worker a
    # connect (and a resolver round trip) that production does not pay.
    with FakeOpenAI(keep_alive=True) as fake:
        fake.slow(args.latency, SUMMARY_ANSWER)
        for text in args.configs:
            config = Config.parse(text)
            results.append(run(env, app, fake, config, rounds=args.rounds, latency_s=args.latency))
            print(f"  ran {config.label}: {results[-1].rate:.2f} summaries/s", flush=True)

    print(
        f"bench/worker_pool: celery -A worker.main worker --queues {LLM_QUEUE}; LLM (FakeOpenAI)"
        f" answers after {args.latency:g} s; {args.rounds} summaries per pool slot"
    )
    print(f"  machine: {host}")
    header = (
        f"{'worker options':<62}{'topics':>7}{'time s':>8}{'summ/s':>8}{'ideal':>8}{'effic.':>8}"
    )
    print(f"  {header}{'LLM calls':>10}{'CPU ms':>8}{'RSS MiB':>9}{'PSS MiB':>9}")
    for r in results:
        print(
            f"  {r.config.label:<62}{r.topics:>7}{r.elapsed_s:>8.2f}{r.rate:>8.2f}{r.ideal:>8.2f}"
            f"{r.rate / r.ideal:>8.0%}{r.llm_calls:>10}{r.cpu_ms:>8.1f}{r.rss_mib:>9.0f}"
            f"{r.memory_mib:>9.0f}"
        )
    print(
        "worker_pool "
        + " ".join(
            f"{r.config.key}_per_s={r.rate:.2f} {r.config.key}_efficiency={r.rate / r.ideal:.3f}"
            f" {r.config.key}_cpu_ms={r.cpu_ms:.1f} {r.config.key}_rss_mib={r.rss_mib:.0f}"
            f" {r.config.key}_pss_mib={r.memory_mib:.0f}"
            for r in results
        )
    )


if __name__ == "__main__":
    main()
