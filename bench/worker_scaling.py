"""bench/worker_scaling ([4.2]): summaries per second of 1, 2 and 4 worker processes, each
the Procfile's `worker` line with a `--hostname` of its own, against an LLM that takes 1 s a
call, with each process's CPU: does the fleet's rate grow with its processes?

For each count n: rounds x concurrency x n closed topics are prepared (as bench/worker_pool
prepares them: six messages each, the SUMMARIZE_TOPIC jobs held back), n workers start
and first summarize one untimed warm-up topic per pool slot; then the jobs are sent as the
web sends them (each to its org's list in the fair queue, a ticket to the broker:
shared/infra/fair.py), and the time runs from the first send to the last summary
written. The LLM is the tests' OpenAI-compatible server (tests/llm_server.py) in this
process, answering after `--latency` seconds, so one process's ideal is concurrency /
latency summaries a second, n processes' n times that, as long as the CPUs keep up.

The CPU columns say whether they do: each worker's CPU time over the timed part (in
cores: seconds of CPU per second), and per summary the workers' CPU ("CPU ms"), the
PostgreSQL backends' of the bench's database ("db ms") and this process's ("bench ms": the
LLM stand-in, which a real fleet does not run, the sends and the polls); Redis, a server
shared with whatever else runs on the machine, is left out. "machine cores" are the whole
machine's busy cores, everyone's work included. "ceiling" is the rate at which every CPU
of the machine would be busy with the run's work alone (the three per-summary costs):
where n x one's rate nears it, the run is CPU-bound and its scaling says how many CPUs
the machine has, not how the workers share the work.

    .venv/bin/python -m bench.worker_scaling [--processes 1 2 4] [--concurrency 128]
        [--rounds 4] [--latency 1.0]

The last line is machine-readable (`key=value` pairs per process count).
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial

import psutil
from celery import Celery
from sqlalchemy import text

from bench.common import (
    SUMMARY_ANSWER,
    BenchEnv,
    Subprocess,
    arguments,
    bench_env,
    cpu_seconds,
    machine,
    subprocess_running,
    wait_until,
    worker_command,
)
from bench.worker_pool import closed_topics, last_finish, summarized, worker_answers
from shared.infra.config import Settings
from shared.infra.fair import FairQueue
from shared.infra.queue import CeleryJobQueue, Job
from tests.llm_server import FakeOpenAI
from worker.app import make_celery


@dataclass(frozen=True)
class Result:
    processes: int
    concurrency: int
    topics: int
    elapsed_s: float
    latency_s: float
    cpu_s: list[float]  # each worker's CPU time (user + system, its children too), timed part
    database_cpu_s: float  # the PostgreSQL backends of the bench's database, timed part
    bench_cpu_s: float  # this process: the LLM stand-in, the sends and the polls
    machine_busy_s: float  # the whole machine's non-idle CPU time over the timed part

    @property
    def rate(self) -> float:
        return self.topics / self.elapsed_s

    @property
    def ideal(self) -> float:
        return self.processes * self.concurrency / self.latency_s

    @property
    def cpu_ms(self) -> float:
        """The workers' CPU per summary, ms."""
        return 1000 * sum(self.cpu_s) / self.topics

    @property
    def cores(self) -> list[float]:
        return [cpu / self.elapsed_s for cpu in self.cpu_s]

    @property
    def machine_cores(self) -> float:
        return self.machine_busy_s / self.elapsed_s

    @property
    def database_cpu_ms(self) -> float:
        return 1000 * self.database_cpu_s / self.topics

    @property
    def bench_cpu_ms(self) -> float:
        return 1000 * self.bench_cpu_s / self.topics

    @property
    def system_cpu_ms(self) -> float:
        """The run's own CPU per summary, ms: workers, their database backends, the bench."""
        return 1000 * (sum(self.cpu_s) + self.database_cpu_s + self.bench_cpu_s) / self.topics

    @property
    def ceiling(self) -> float:
        """Summaries a second with every CPU of the machine busy with this run's work alone
        (Redis's share, a server the other runs on the machine use too, left out)."""
        return (os.cpu_count() or 1) * 1000 / self.system_cpu_ms


def busy_seconds() -> float:
    """The machine's non-idle CPU seconds so far, all CPUs."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def database_cpu_seconds(env: BenchEnv, before: dict[int, float] | None = None) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend on the bench's database (the workers'
    pooled connections); with `before`, only the time since then (all of a backend's
    time if it started since: a pool grows under load)."""
    with env.engine.connect() as connection:
        pids = connection.scalars(
            text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        ).all()
    used = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:  # gone since, or not ours to read
            continue
        used[pid] = times.user + times.system
    if before is None:
        return used
    return {pid: cpu - before.get(pid, 0.0) for pid, cpu in used.items()}


def command(concurrency: int, hostname: str) -> list[str]:
    """The Procfile's worker with the bench's concurrency and its own name."""
    words = worker_command()
    words[words.index("--concurrency") + 1] = str(concurrency)
    return [*words, "--hostname", hostname]


def send_and_wait(
    env: BenchEnv,
    app: Celery,
    jobs: list[Job],
    workers: list[Subprocess],
    *,
    what: str,
    per_job_s: float,
) -> None:
    """Send the summary jobs, then wait until every one of their topics is summarized."""
    queue = CeleryJobQueue(app, FairQueue(env.redis))  # as the web sends them: tickets
    topic_ids = [uuid.UUID(job.kwargs["topic_id"]) for job in jobs]
    for job in jobs:
        queue.send(job)

    def done() -> bool:
        for worker in workers:
            worker.check_alive(what)
        return summarized(env, topic_ids) == len(topic_ids)

    # The time is the summaries' own (last_finish), not the poll's: a poll a second keeps
    # the bench's share of the CPU, which the workers need, small.
    wait_until(done, timeout_s=60 + 3 * len(jobs) * per_job_s, what=what, poll_s=1.0)


def run(
    env: BenchEnv,
    app: Celery,
    fake: FakeOpenAI,
    *,
    processes: int,
    concurrency: int,
    rounds: int,
    latency_s: float,
) -> Result:
    warmup = closed_topics(env, concurrency * processes)
    jobs = closed_topics(env, rounds * concurrency * processes)
    topic_ids = [uuid.UUID(job.kwargs["topic_id"]) for job in jobs]
    environment = env.process_environment(
        DRIFTLESS_LLM="openai", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="x"
    )
    tag = uuid.uuid4().hex[:6]
    names = [f"scale-{processes}-{i}-{tag}@localhost" for i in range(processes)]
    with ExitStack() as stack:
        workers = [
            stack.enter_context(subprocess_running(command(concurrency, name), environment))
            for name in names
        ]
        for name, worker in zip(names, workers, strict=True):
            wait_until(partial(worker_answers, app, name), timeout_s=60, what=name, process=worker)
        what = f"{processes} workers"
        send_and_wait(env, app, warmup, workers, what=f"{what}: warm-up", per_job_s=latency_s)
        cpu_before = [cpu_seconds(w.process.pid) for w in workers]
        database_before = database_cpu_seconds(env)
        bench_before = cpu_seconds(os.getpid())
        busy_before = busy_seconds()
        started = dt.datetime.now(dt.UTC)
        send_and_wait(env, app, jobs, workers, what=f"{what}: summaries", per_job_s=latency_s)
        busy_s = busy_seconds() - busy_before
        bench_s = cpu_seconds(os.getpid()) - bench_before
        database_s = sum(database_cpu_seconds(env, database_before).values())
        cpu_s = [cpu_seconds(w.process.pid) - b for w, b in zip(workers, cpu_before, strict=True)]
    elapsed = (last_finish(env, topic_ids) - started).total_seconds()
    return Result(
        processes, concurrency, len(jobs), elapsed, latency_s, cpu_s, database_s, bench_s, busy_s
    )


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--concurrency", type=int, default=128, help="greenlets per worker (the Procfile's: 128)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="summaries per pool slot")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per LLM call")
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    app = make_celery(
        Settings(database_url=env.database_url, redis_url=env.redis_url, broker_url=env.broker_url)
    )
    results: list[Result] = []
    with FakeOpenAI(keep_alive=True) as fake:
        fake.slow(args.latency, SUMMARY_ANSWER)
        for processes in args.processes:
            result = run(
                env, app, fake, processes=processes, concurrency=args.concurrency,
                rounds=args.rounds, latency_s=args.latency,
            )  # fmt: skip
            results.append(result)
            print(f"  ran {processes} workers: {results[-1].rate:.2f} summaries/s", flush=True)

    one = results[0].rate / results[0].processes
    print(
        f"bench/worker_scaling: the Procfile's worker at --concurrency {args.concurrency}, each"
        f" with its own --hostname; LLM (FakeOpenAI) answers after {args.latency:g} s;"
        f" {args.rounds} summaries per pool slot"
    )
    print(f"  machine: {host}")
    print(
        f"  {'workers':>7}{'topics':>7}{'time s':>8}{'summ/s':>8}{'ideal':>8}{'x one':>7}"
        f"{'scaling':>8}{'CPU ms':>8}{'db ms':>7}{'bench ms':>9}{'ceiling':>9}{'machine cores':>14}"
        "  each worker's cores"
    )
    for r in results:
        print(
            f"  {r.processes:>7}{r.topics:>7}{r.elapsed_s:>8.2f}{r.rate:>8.2f}{r.ideal:>8.0f}"
            f"{r.rate / one:>7.2f}{r.rate / (one * r.processes):>8.0%}{r.cpu_ms:>8.1f}"
            f"{r.database_cpu_ms:>7.1f}{r.bench_cpu_ms:>9.1f}{r.ceiling:>9.0f}"
            f"{r.machine_cores:>14.2f}  " + " ".join(f"{c:.2f}" for c in r.cores)
        )
    print(
        "worker_scaling "
        + " ".join(
            f"{k}_per_s={r.rate:.2f} {k}_scaling={r.rate / (one * r.processes):.3f}"
            f" {k}_cpu_ms={r.cpu_ms:.1f} {k}_machine_cores={r.machine_cores:.2f}"
            f" {k}_db_cpu_ms={r.database_cpu_ms:.1f} {k}_bench_cpu_ms={r.bench_cpu_ms:.1f}"
            f" {k}_ceiling={r.ceiling:.0f}"
            for r in results
            for k in [f"p{r.processes}"]
        )
    )


if __name__ == "__main__":
    main()
