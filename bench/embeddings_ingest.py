"""bench/embeddings_ingest ([4.2]): texts embedded per second, and the lag, of real
`celery` workers on the embeddings queues against an embeddings server that answers at
once, with 1 and 2 worker processes.

20,000 messages over 20 orgs (10 sessions of 100 messages each per org) are posted once,
on the embedded PostgreSQL with pgvector (tests/vectors.py). Each configuration embeds
all of them afresh under a model name of its own (DRIFTLESS_EMBEDDINGS_MODEL), so each
starts from the same backlog: its messages are dated "just now" (settled, as beat's tick
wants) when the clock starts. The bench sends beat's tick (`driftless.embed_pending`)
every EMBED_TICK_S, as beat does, to N `celery -A worker.main worker --queues
embeddings,embeddings_bulk --pool gevent --concurrency 64` subprocesses (deploy/k8s's
worker-embeddings), and polls the vectors stored. The embeddings server is the tests'
OpenAI-compatible one (tests/llm_server.py, in this process, keep-alive) answering one
fixed 64-long vector per input, so what is measured is the workers' path: the tick, the
jobs, the database reads and writes and the provider client.

- texts/s: 20,000 / (the last vector's commit time - the first tick).
- max lag: the age of the oldest message without a vector (driftless_embeddings_lag_seconds'
  definition), counted in the database every 0.2 s, the highest sampled: about the time
  the backlog took to drain. end lag: the gauge itself (worker/embeddings_metrics.py,
  from the tick's mark in Redis) once a tick ran after the drain (waited for up to 60 s,
  ticks still sent every EMBED_TICK_S): 0 once every message has its vector.

    .venv/bin/python -m bench.embeddings_ingest [--workers 1 2] [--messages 20000]
        [--baseline-tree PATH]

`--baseline-tree` also runs the workers (and their tick) of another checkout (a git
worktree of the previous code: its directory as their working directory and
PYTHONPATH), first, in the same run, on the same
database and server: its row is labelled `baseline` (one worker: the previous code's
single sweep runs at the same pace with more).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from celery import Celery
from sqlalchemy import text

from bench.common import (
    BIN,
    BenchEnv,
    arguments,
    bench_env,
    cpu_seconds,
    machine,
    subprocess_running,
    wait_until,
)
from shared.auth.service import create_api_key, org_for_key
from shared.embeddings.store import MESSAGE_MISSING
from shared.embeddings.sweep import EMBED_TICK_S, Cursors
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EMBED_PENDING, CeleryJobQueue, Job, RecordingQueue
from shared.sessions.service import NewMessage, create_session, post_messages
from tests.llm_server import FakeOpenAI
from tests.vectors import pgvector_server
from worker.app import make_celery

ORGS = 20
SESSIONS_PER_ORG = 10
DIMENSIONS = 64
QUEUES = "embeddings,embeddings_bulk"
CONCURRENCY = 64  # deploy/k8s/worker-embeddings.yaml


@dataclass(frozen=True)
class Result:
    label: str
    workers: int
    texts: int
    elapsed_s: float
    max_lag_s: float
    end_lag_s: float
    cpu_s: float  # the workers' CPU (user + system) over the run
    requests: int  # calls to the embeddings server

    @property
    def rate(self) -> float:
        return self.texts / self.elapsed_s


def post_backlog(env: BenchEnv, messages: int) -> None:
    """`messages` messages over ORGS orgs, each in SESSIONS_PER_ORG sessions."""
    per_session = messages // (ORGS * SESSIONS_PER_ORG)
    for org in range(ORGS):
        with UnitOfWork(env.session_factory, RecordingQueue()) as uow:
            key = create_api_key(uow=uow, org_name=f"bench-org-{org}-{uuid.uuid4().hex[:6]}")
            uow.session.flush()
            org_id = org_for_key(uow=uow, key=key)
            assert org_id is not None
            for session in range(SESSIONS_PER_ORG):
                created = create_session(
                    uow=uow, org_id=org_id, agent_id="bench", user_id=f"user-{session}"
                )
                turns = [
                    NewMessage(role=("user", "assistant")[i % 2],
                               content=f"Turn {i} of org {org}: invoices, deadlines, Lisbon.")
                    for i in range(per_session)
                ]  # fmt: skip
                post_messages(uow=uow, org_id=org_id, session_id=created.session.id,
                              messages=turns)  # fmt: skip
            uow.commit()


def instant_vectors(body: dict[str, Any]) -> dict[str, Any]:
    """One fixed vector per input, at once: the server costs the workers nothing."""
    inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
    vector = [1.0 / DIMENSIONS**0.5] * DIMENSIONS
    data = [{"object": "embedding", "index": i, "embedding": vector} for i in range(len(inputs))]
    usage = {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}
    return {"object": "list", "data": data, "model": body["model"], "usage": usage}


def answers(app: Celery, name: str) -> bool:
    return bool(app.control.ping(destination=[name], timeout=0.5))


def stored(env: BenchEnv, model: str) -> tuple[int, dt.datetime | None]:
    with env.uow() as uow:
        count, last = uow.session.execute(
            text("SELECT count(*), max(created_at) FROM message_vectors WHERE model = :m"),
            {"m": model},
        ).one()
    return int(count), last


def lag_s(env: BenchEnv, model: str) -> float:
    """The age of the oldest message without a vector, counted in the database (the
    gauge's definition, measured the same way for the baseline, which has no gauge)."""
    with env.uow() as uow:
        oldest = uow.session.execute(
            text(f"SELECT extract(epoch FROM now() - min(m.created_at)) FROM messages m"
                 f" WHERE {MESSAGE_MISSING}"), {"model": model},
        ).scalar()  # fmt: skip
    return 0.0 if oldest is None else float(oldest)


def gauge_s(env: BenchEnv, model: str) -> float:
    """driftless_embeddings_lag_seconds, as worker/embeddings_metrics.py computes it."""
    oldest = Cursors(env.redis, model).oldest()
    return 0.0 if oldest is None else max(0.0, time.time() - oldest)


def run(
    env: BenchEnv, fake: FakeOpenAI, *, workers: int, texts: int, tree: Path | None, label: str
) -> Result:
    model = f"bench-{label}-{workers}-{uuid.uuid4().hex[:6]}"
    environment = env.process_environment(
        DRIFTLESS_EMBEDDINGS="openai", DRIFTLESS_EMBEDDINGS_BASE_URL=fake.base_url,
        DRIFTLESS_EMBEDDINGS_API_KEY="x", DRIFTLESS_EMBEDDINGS_MODEL=model,
        DRIFTLESS_LLM_MAX_RETRIES="0",
        **({"PYTHONPATH": str(tree)} if tree else {}),
    )  # fmt: skip
    app = make_celery(Settings(database_url=env.database_url, redis_url=env.redis_url,
                               broker_url=env.broker_url))  # fmt: skip
    names = [f"bench-emb-{label}-{n}-{uuid.uuid4().hex[:6]}@localhost" for n in range(workers)]
    commands = [
        [str(BIN / "celery"), "-A", "worker.main", "worker", "--queues", QUEUES,
         "--pool", "gevent", "--concurrency", str(CONCURRENCY), "--hostname", name,
         "--loglevel", "WARNING", "--without-gossip", "--without-mingle"]
        for name in names
    ]  # fmt: skip
    with contextlib.ExitStack() as stack:
        processes = [
            stack.enter_context(subprocess_running(c, environment, cwd=tree)) for c in commands
        ]
        for name, process in zip(names, processes, strict=True):
            wait_until(partial(answers, app, name), timeout_s=60, what=name, process=process)
        with env.uow() as uow:  # the backlog, settled, dated now
            uow.session.execute(text("UPDATE messages SET created_at = now() - interval '3 s'"))
            uow.commit()
        queue = CeleryJobQueue(app)
        cpu_before = sum(cpu_seconds(p.process.pid) for p in processes)
        requests_before = len(fake.embedding_requests)
        started = dt.datetime.now(dt.UTC)
        max_lag, next_tick = 0.0, 0.0
        deadline = time.monotonic() + 1200
        while True:
            if time.monotonic() >= next_tick:
                queue.send(Job(EMBED_PENDING))  # as beat sends it
                next_tick = time.monotonic() + EMBED_TICK_S
            count, last = stored(env, model)
            max_lag = max(max_lag, lag_s(env, model))
            if count >= texts:
                break
            for process in processes:
                process.check_alive(label)
            if time.monotonic() > deadline:
                raise SystemExit(f"{label} x{workers}: {count} of {texts} after 1200 s")
            time.sleep(0.2)
        cpu_s = sum(cpu_seconds(p.process.pid) for p in processes) - cpu_before
        # Ticks go on after the drain, as beat's do: the next one that runs finds nothing
        # missing (on a loaded host it may start seconds later).
        measure = gauge_s if tree is None else lag_s
        settle_by = time.monotonic() + 60
        while (end_lag := measure(env, model)) > 0 and time.monotonic() < settle_by:
            if time.monotonic() >= next_tick:
                queue.send(Job(EMBED_PENDING))
                next_tick = time.monotonic() + EMBED_TICK_S
            time.sleep(0.2)
    assert last is not None
    return Result(label, workers, count, (last - started).total_seconds(), max_lag, end_lag,
                  cpu_s, len(fake.embedding_requests) - requests_before)  # fmt: skip


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="processes")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="a checkout of the previous code, run the same way")  # fmt: skip
    args = parser.parse_args()
    host = machine()
    trees: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline_tree:
        trees.insert(0, ("baseline", args.baseline_tree.resolve()))
    results = []
    with pgvector_server() as admin_url, FakeOpenAI(keep_alive=True) as fake:
        env = bench_env(admin_url)
        fake.embeddings_answer_with(instant_vectors)
        post_backlog(env, args.messages)
        texts = (args.messages // (ORGS * SESSIONS_PER_ORG)) * ORGS * SESSIONS_PER_ORG
        for label, tree in trees:
            # The previous code's one sweep at a time is as fast with one worker as with more.
            for workers in args.workers if tree is None else args.workers[:1]:
                result = run(env, fake, workers=workers, texts=texts, tree=tree, label=label)
                results.append(result)
                print(f"  ran {label} x{workers}: {result.rate:.0f} texts/s", flush=True)
        env.engine.dispose()
    print(
        f"bench/embeddings_ingest: {texts} messages over {ORGS} orgs; celery worker --queues"
        f" {QUEUES} --pool gevent --concurrency {CONCURRENCY}; beat's tick every"
        f" {EMBED_TICK_S:g} s; an embeddings server answering at once ({DIMENSIONS} long)"
    )
    print(f"  machine: {host} (os.cpu_count()={os.cpu_count()})")
    print(f"  {'code':<10}{'workers':>8}{'texts':>8}{'time s':>9}{'texts/s':>9}"
          f"{'max lag s':>11}{'end lag s':>11}{'requests':>10}{'CPU ms/text':>13}")  # fmt: skip
    for r in results:
        print(f"  {r.label:<10}{r.workers:>8}{r.texts:>8}{r.elapsed_s:>9.2f}{r.rate:>9.0f}"
              f"{r.max_lag_s:>11.1f}{r.end_lag_s:>11.1f}{r.requests:>10}"
              f"{1000 * r.cpu_s / r.texts:>13.2f}")  # fmt: skip
    print("embeddings_ingest " + " ".join(
        f"{r.label}_x{r.workers}_per_s={r.rate:.0f} {r.label}_x{r.workers}_max_lag_s="
        f"{r.max_lag_s:.1f}" for r in results
    ))  # fmt: skip


if __name__ == "__main__":
    main()
