"""Fair share of the model: how long an org waits behind another org's backlog.

The scenario of issue [3.2], on the Procfile's worker (gevent, 128 greenlets, every
queue) against the tests' scripted model at `--latency` seconds a call:
  - org A closes `--backlog` topics at once (3,000: about 30 s of model work);
  - over the next `--spread` seconds, `--late` topics of org B close one by one, or,
    with `--orgs N`, one topic each of N orgs.
For each late topic it prints the wait from its close to its summary request reaching
the model (the fake server's receive time) and to its summary being readable (committed),
and A's drain rate in summaries a second. The closes go through the service layer and
the same job queue as the web's (model jobs wait in their org's list, the broker carries
tickets: shared/infra/fair.py).

    python -m bench.fairness                   # A's 3,000, then B's 10 over 5 s
    python -m bench.fairness --orgs 50         # A's 3,000, then 50 orgs of one topic
    python -m bench.fairness --backlog 600     # a shorter run
    python -m bench.fairness --fifo            # the same without fair share: one FIFO
    python -m bench.fairness --own-campaign    # A's 3,000 as its own campaign (bulk lane),
                                               # A's own 10 live closes behind it

Under quotas ([4.1]; the late closes should be readable within 5 s):
    python -m bench.fairness --backlog 100 --late 5 --latency 0.5 --fleet-rpm 120
        # the fleet's quota, 120 calls a minute: A's 100 take their turns with B's
    python -m bench.fairness --backlog 140 --late 5 --latency 0.5 --own-model-latency 20 \
        --skip-drain
        # A's own model answers in 20 s: A's calls hold DRIFTLESS_OWN_MODEL_CALLS_PER_ORG
        # (32) of the worker's 128 greenlets, B's closes go to the fleet's model
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from cryptography.fernet import Fernet
from sqlalchemy import func, select

from bench.common import (
    SUMMARY_ANSWER,
    BenchEnv,
    arguments,
    bench_env,
    describe,
    machine,
    subprocess_running,
    wait_until,
    worker_command,
)
from shared.auth.service import create_api_key, org_for_key
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.fair import FairQueue
from shared.infra.queue import SUMMARIZE_TOPIC, CeleryJobQueue, Job, RecordingQueue
from shared.infra.sealing import SecretBox
from shared.providers.service import set_provider
from shared.sessions.service import create_session, open_topic, post_message
from shared.topics.models import Topic
from tests.llm_server import FakeOpenAI
from worker.app import make_celery

TURNS = [
    ("user", "Let's settle the stack for the billing service before Friday."),
    ("assistant", "PostgreSQL for storage, Celery on Redis for the retries."),
    ("user", "Agreed; deadline Friday."),
]
POLL_S = 0.05


def new_org(env: BenchEnv, name: str) -> uuid.UUID:
    with env.uow() as uow:
        key = create_api_key(uow=uow, org_name=f"{name}-{uuid.uuid4().hex[:6]}")
        uow.commit()
    with env.uow() as uow:
        org_id = org_for_key(uow=uow, key=key)
    assert org_id is not None
    return org_id


def sessions_with_messages(
    env: BenchEnv, org_id: uuid.UUID, count: int, tag: str
) -> list[uuid.UUID]:
    """`count` sessions whose active topic holds a short conversation; the first message
    names the session by `tag` so that its summary request can be told apart."""
    with env.uow() as uow:
        sessions = [
            create_session(uow=uow, org_id=org_id, agent_id="bench", user_id=f"u{i}").session.id
            for i in range(count)
        ]
        for n, session_id in enumerate(sessions):
            for i, (role, content) in enumerate(TURNS):
                text = f"[{tag}-{n}] {content}" if i == 0 else content
                post_message(uow=uow, org_id=org_id, session_id=session_id, role=role, content=text)
        uow.commit()
    return sessions


def close(env: BenchEnv, org_id: uuid.UUID, session_ids: list[uuid.UUID]) -> list[Job]:
    """Close each session's topic in one transaction; the summary jobs, not yet sent."""
    recorded = RecordingQueue()
    with UnitOfWork(env.session_factory, recorded) as uow:
        for session_id in session_ids:
            open_topic(uow=uow, org_id=org_id, session_id=session_id, title=None)
        uow.commit()
    return [job for job in recorded.sent if job.task == SUMMARIZE_TOPIC]


def summarized(env: BenchEnv, topic_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    with env.uow() as uow:
        done = uow.session.scalars(
            select(Topic.id).where(
                Topic.id.in_(topic_ids), Topic.summarized_through_id == Topic.last_message_id
            )
        ).all()
    return set(done)


def count_summarized(env: BenchEnv, topic_ids: list[uuid.UUID]) -> int:
    with env.uow() as uow:
        done = uow.session.scalar(
            select(func.count()).where(
                Topic.id.in_(topic_ids), Topic.summarized_through_id == Topic.last_message_id
            )
        )
    return int(done or 0)


@dataclass
class Late:
    """A late topic: its tag, its org, when it closed, when it was readable."""

    tag: str
    org_id: uuid.UUID
    session_id: uuid.UUID
    topic_id: uuid.UUID | None = None
    closed_at: float = 0.0
    readable_at: float | None = None


@dataclass
class Watch:
    """Polls the late topics until each is readable (a thread)."""

    env: BenchEnv
    lates: list[Late]
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.done.is_set():
            waiting = {late.topic_id: late for late in self.lates if late.topic_id and
                       late.readable_at is None}  # fmt: skip
            if waiting:
                now = time.time()
                for topic_id in summarized(self.env, list(waiting)):
                    waiting[topic_id].readable_at = now
            if all(late.readable_at for late in self.lates):
                return
            time.sleep(POLL_S)


def reached_model(fake: FakeOpenAI, tag: str) -> float | None:
    """When the first summary request naming `tag` reached the model."""
    marker = f"[{tag}]"
    for body, at in zip(fake.requests, fake.received_at, strict=False):
        if any(marker in str(m.get("content", "")) for m in body.get("messages", [])):
            return at
    return None


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--backlog", type=int, default=3000, help="org A's closes at once")
    parser.add_argument("--late", type=int, default=10, help="org B's closes after A's")
    parser.add_argument("--orgs", type=int, default=0,
                        help="instead of B: this many orgs of one late close each")  # fmt: skip
    parser.add_argument("--spread", type=float, default=5.0, help="seconds the late closes span")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per model call")
    parser.add_argument("--fifo", action="store_true",
                        help="model jobs straight to the broker, as before fair share")  # fmt: skip
    parser.add_argument("--own-campaign", action="store_true",
                        help="A's backlog is its own campaign's (bulk lane); the late closes"
                        " are A's own, live")  # fmt: skip
    parser.add_argument("--fleet-rpm", type=int, default=0,
                        help="the fleet's quota, calls a minute (DRIFTLESS_LLM_RPM)")  # fmt: skip
    parser.add_argument("--own-model-latency", type=float, default=0.0,
                        help="org A on its own model, at this many seconds a call")  # fmt: skip
    parser.add_argument("--skip-drain", action="store_true",
                        help="end once the late topics are readable, not A's backlog")  # fmt: skip
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    settings = Settings(database_url=env.database_url, redis_url=env.redis_url,
                        broker_url=env.broker_url)  # fmt: skip
    app = make_celery(settings)
    queue = CeleryJobQueue(app, None if args.fifo else FairQueue(env.redis))

    org_a = new_org(env, "org-a")
    print(f"setting up: org A's {args.backlog} conversations ...", flush=True)
    backlog_sessions = sessions_with_messages(env, org_a, args.backlog, "a")
    lates: list[Late] = []
    late_orgs = [new_org(env, f"org-{n}") for n in range(args.orgs)] or [
        org_a if args.own_campaign else new_org(env, "org-b")
    ]
    count = args.orgs or args.late
    for n in range(count):
        org_id = late_orgs[n % len(late_orgs)]
        [session_id] = sessions_with_messages(env, org_id, 1, f"late{n}")
        lates.append(Late(f"late{n}-0", org_id, session_id))

    with FakeOpenAI() as fake, FakeOpenAI() as own:
        fake.slow(args.latency, SUMMARY_ANSWER)
        own.slow(args.own_model_latency, SUMMARY_ANSWER)
        # The worker opens A's key with the key it was sealed with ([4.1]: never stored as given).
        sealing_key = Fernet.generate_key().decode()
        if args.own_model_latency:  # A's own model, on a server of its own
            with env.uow() as uow:
                set_provider(
                    uow=uow, org_id=org_a, base_url=own.base_url, api_key="sk-own",
                    model="own-model", box=SecretBox(sealing_key), allow_private=True,
                )  # fmt: skip
                uow.commit()
        environment = env.process_environment(
            DRIFTLESS_SECRET_KEYS=sealing_key,
            DRIFTLESS_LLM="openai", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="x",
            DRIFTLESS_LLM_RPM=str(args.fleet_rpm), DRIFTLESS_WEBHOOK_ALLOW_PRIVATE="1",
            DRIFTLESS_LLM_TIMEOUT_S=str(max(30.0, 2 * args.own_model_latency)),
        )  # fmt: skip
        with subprocess_running(worker_command(), environment) as worker:
            time.sleep(3)  # the worker connects; the first jobs then start at once
            worker.check_alive("worker")
            backlog_jobs = close(env, org_a, backlog_sessions)
            if args.own_campaign:  # as a re-evaluation campaign sends them
                backlog_jobs = [Job(j.task, j.kwargs, lane="bulk", org=j.org) for j in backlog_jobs]
            backlog_ids = [uuid.UUID(job.kwargs["topic_id"]) for job in backlog_jobs]
            started = time.time()
            for job in backlog_jobs:  # "A closed 3,000 topics"
                queue.send(job)
            watch = Watch(env, lates)
            watcher = threading.Thread(target=watch.run, daemon=True)
            watcher.start()
            gap = args.spread / max(1, len(lates) - 1)
            for n, late in enumerate(lates):
                time.sleep(max(0.0, started + n * gap - time.time()))
                late.closed_at = time.time()
                [job] = close(env, late.org_id, [late.session_id])
                late.topic_id = uuid.UUID(job.kwargs["topic_id"])
                queue.send(job)
            watcher.join(timeout=120 + len(lates) * args.latency)
            watch.done.set()
            drained_at_late = count_summarized(env, backlog_ids)
            own_in_flight = own.in_flight
            if not args.skip_drain:
                wait_until(
                    lambda: count_summarized(env, backlog_ids) == len(backlog_ids),
                    timeout_s=120 + 3 * args.backlog * args.latency,
                    what="org A's backlog",
                    process=worker,
                )
            finished = time.time()
    to_model = [(reached_model(fake, late.tag) or float("nan")) - late.closed_at for late in lates]
    readable = [(late.readable_at or float("nan")) - late.closed_at for late in lates]
    print(host)
    print(f"worker: {' '.join(worker_command()[1:])}")
    who = f"{args.orgs} orgs of one topic" if args.orgs else f"org B's {args.late} topics"
    what = f"closed {args.backlog} topics at once"
    if args.own_campaign:
        who, what = f"its own {args.late} live closes", f"ran a {args.backlog}-topic campaign"
    how = "one FIFO queue" if args.fifo else "fair share"
    if args.fleet_rpm:
        how += f", fleet quota {args.fleet_rpm} calls a minute"
    if args.own_model_latency:
        how += f", A on its own model at {args.own_model_latency:g} s a call"
        print(f"  A's calls in flight at its own model when B's were readable: {own_in_flight}")
    print(f"[{how}] org A {what}; {who} closed over {args.spread:.0f} s;"
          f" model at {args.latency:.2f} s a call")  # fmt: skip
    print(f"  late close -> request at the model:  {describe([s * 1000 for s in to_model])}"
          f"   max {max(to_model):.2f} s")  # fmt: skip
    print(f"  late close -> summary readable:      {describe([s * 1000 for s in readable])}"
          f"   max {max(readable):.2f} s")  # fmt: skip
    elapsed = finished - started
    if args.skip_drain:
        print(f"  org A: {drained_at_late} of {args.backlog} done when the last late topic was"
              " readable")  # fmt: skip
        return
    print(f"  org A: {args.backlog} summaries in {elapsed:.1f} s = {args.backlog / elapsed:.1f}/s"
          f" ({drained_at_late} done when the last late topic was readable)")  # fmt: skip


if __name__ == "__main__":
    main()
