"""bench/enqueue (P2): what sending jobs costs a message post, against a bare apply_async.

A message post enqueues at most one job: the heartbeat drift evaluation of every 10th
user/assistant message of a topic (R26), sent by the unit of work after the commit.
So the honest "enqueue cost per message" is the time the post spends handing jobs to
the broker, divided by all messages posted. It is measured two ways, on the machine's
PostgreSQL and a real Redis broker (no worker runs; the jobs pile up and are dropped
at the end):

- directly: the time inside `queue.send` (the web's queue,
  CeleryJobQueue) during `post_message` + commit, per message and per job;
- as a difference: the same posts with a queue that sends nothing, interleaved
  message by message (noisy: the database work per message is far larger).

Both are compared with a bare `apply_async` of a no-op task on the same broker, sent
at the heartbeat's pace between the posts (the ratio's denominator: a send after other
work costs more than one in a tight loop, so like is compared with like), and back to
back. An exit trigger (POST /evaluate) is not part of a message post; its cost per trigger is shown
for reference (debounce script in Redis, plus the fire job the first of a burst sends).

    .venv/bin/python -m bench.enqueue [--messages 3000] [--topics 30]

The last line is machine-readable (`key=value` pairs).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable

from bench.common import BenchEnv, arguments, bench_env, describe, machine
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EVALUATE_TOPIC, CeleryJobQueue, Job, JobQueue
from shared.sessions.service import create_session, post_message
from shared.triggers.debounce import Debouncer
from shared.triggers.service import debounce_trigger
from worker.app import make_celery

CONTENT = "We decided to keep invoices in EUR; the migration deadline is March 3."


class TimedQueue:
    """Times every send of the queue it wraps."""

    def __init__(self, inner: JobQueue) -> None:
        self._inner = inner
        self.samples_us: list[float] = []

    def send(self, job: Job) -> None:
        began = time.perf_counter()
        self._inner.send(job)
        self.samples_us.append((time.perf_counter() - began) * 1e6)


class DiscardingQueue:
    """A queue that sends nothing: the post without its enqueue."""

    def send(self, job: Job) -> None:
        pass


def topics(env: BenchEnv, org_id: uuid.UUID, count: int) -> list[uuid.UUID]:
    with env.uow() as uow:
        ids = [
            create_session(uow=uow, org_id=org_id, agent_id="bench", user_id=f"u{i}").session.id
            for i in range(count)
        ]
        uow.commit()
    return ids


def post(env: BenchEnv, queue: JobQueue, org_id: uuid.UUID, session_id: uuid.UUID, n: int) -> float:
    """One message post as the web runs it (a unit of work, commit, jobs after); ms."""
    began = time.perf_counter()
    with UnitOfWork(env.session_factory, queue) as uow:
        post_message(
            uow=uow, org_id=org_id, session_id=session_id,
            role="user" if n % 2 == 0 else "assistant", content=f"{n}: {CONTENT}",
        )  # fmt: skip
        uow.commit()
    return (time.perf_counter() - began) * 1000


def timed_calls(call: Callable[[], object], n: int) -> list[float]:
    """µs per call."""
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        samples.append((time.perf_counter() - began) * 1e6)
    return samples


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--messages", type=int, default=3000, help="per queue")
    parser.add_argument("--topics", type=int, default=30, help="per queue")
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    settings = Settings(
        database_url=env.database_url, redis_url=env.redis_url, broker_url=env.broker_url,
        llm="local",
    )  # fmt: skip
    app = make_celery(settings)

    @app.task(name="bench.noop")
    def noop() -> None:
        """Never runs (no worker): only its sending is measured."""

    celery_queue = CeleryJobQueue(app)
    real = TimedQueue(celery_queue)
    org_id = env.org_id()
    real_topics, null_topics = topics(env, org_id, args.topics), topics(env, org_id, args.topics)

    warm = args.topics * 10  # every topic past its first heartbeat; pools and plans warm
    for n in range(warm):
        post(env, real, org_id, real_topics[n % args.topics], n)
        post(env, DiscardingQueue(), org_id, null_topics[n % args.topics], n)
    noop.apply_async()
    real.samples_us.clear()
    with_jobs: list[float] = []
    without_jobs: list[float] = []
    bare_between: list[float] = []  # at the heartbeat's pace, between posts, as it runs
    for n in range(warm, warm + args.messages):  # interleaved: machine drift hits both alike
        with_jobs.append(post(env, real, org_id, real_topics[n % args.topics], n))
        without_jobs.append(post(env, DiscardingQueue(), org_id, null_topics[n % args.topics], n))
        if n % 10 == 5:
            bare_between += timed_calls(noop.apply_async, 1)

    heartbeat = Job(EVALUATE_TOPIC, {"topic_id": str(uuid.uuid4()), "trigger": "heartbeat"})
    web_queue = celery_queue
    bare: list[float] = []
    job_send: list[float] = []
    for _ in range(10):  # back to back, alternating in blocks
        bare += timed_calls(noop.apply_async, args.messages // 10)
        job_send += timed_calls(lambda: web_queue.send(heartbeat), args.messages // 10)

    debouncer = Debouncer.from_settings(env.redis, settings)
    trigger_queue = TimedQueue(celery_queue)
    triggers = timed_calls(
        lambda: debounce_trigger(
            debouncer=debouncer, queue=trigger_queue, topic_id=uuid.uuid4(),
            last_message_id=1, trigger="visibility",
        ),
        args.messages // 3,
    )  # fmt: skip
    env.flush_broker()  # the jobs no worker will ever run

    per_message_us = sum(real.samples_us) / args.messages
    difference_us = (statistics.fmean(with_jobs) - statistics.fmean(without_jobs)) * 1000
    bare_us = statistics.fmean(bare_between)
    print(
        f"bench/enqueue: {args.messages} message posts per queue over {args.topics} topics"
        f" (heartbeat every 10th, R26), machine PostgreSQL + Redis broker"
    )
    print(f"  machine: {host}")
    print(f"  post_message + commit, real queue (ms):     {describe(with_jobs)}")
    print(f"  post_message + commit, sends nothing (ms):  {describe(without_jobs)}")
    jobs = len(real.samples_us)
    print(f"  jobs sent: {jobs} ({jobs / args.messages:.3f} a message)")
    print(f"  {'':<56}{'mean µs':>9}{'p50 µs':>9}  {'mean ÷ bare':>11}")
    rows = [
        ("enqueue per message (time in send ÷ messages)", [per_message_us]),
        ("  the same, as a difference of mean posts (noisy)", [difference_us]),
        ("send of one heartbeat job, after a post's commit", real.samples_us),
        ("bare apply_async of a no-op task, between posts", bare_between),
        ("send of one heartbeat job, back to back", job_send),
        ("bare apply_async of a no-op task, back to back", bare),
    ]
    for label, values in rows:
        mean = statistics.fmean(values)
        median = f"{statistics.median(values):9.1f}" if len(values) > 1 else f"{'':9}"
        print(f"  {label:<56}{mean:9.1f}{median}  {mean / bare_us:11.3f}")
    print(
        f"  for reference, an exit trigger (debounce script + fire job), per trigger:"
        f" mean {statistics.fmean(triggers):.1f} µs, of which the send"
        f" {statistics.fmean(trigger_queue.samples_us or [0.0]):.1f} µs"
    )
    per_job_us = statistics.fmean(real.samples_us)
    print(
        f"enqueue messages={args.messages} per_message_us={per_message_us:.2f}"
        f" per_job_us={per_job_us:.1f} apply_async_us={bare_us:.1f}"
        f" ratio_per_message={per_message_us / bare_us:.3f}"
        f" ratio_per_job={per_job_us / bare_us:.3f}"
        f" post_with_jobs_ms={statistics.fmean(with_jobs):.3f}"
        f" post_without_jobs_ms={statistics.fmean(without_jobs):.3f}"
    )


if __name__ == "__main__":
    main()
