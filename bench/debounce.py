"""bench/debounce: 500 topics, each a burst of exit triggers of random size and spacing,
against the machine's Redis and a real Celery worker (R27).

Prints evaluations per burst (must be exactly 1), the distribution of the fire delay
after the burst's last trigger, and Redis round trips per trigger.

    .venv/bin/python -m bench.debounce [--topics 500]
"""

from __future__ import annotations

import datetime as dt
import random
import statistics
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
from celery.contrib.testing.worker import start_worker
from sqlalchemy import func, select

from bench.common import BenchEnv, arguments, bench_env, percentile
from shared.auth.service import org_for_key
from shared.evaluations.models import Evaluation
from shared.infra.config import Settings
from shared.infra.queue import CeleryJobQueue
from shared.sessions.service import create_session, post_message
from shared.triggers.debounce import Debouncer
from shared.triggers.service import debounce_trigger
from worker.app import make_celery

MAX_BURST = 20
MAX_GAP_S = 0.5  # below the 2 s debounce: a burst is a burst


class CountingRedis(redis.Redis):
    """A client that counts its round trips (one per command; a script call is one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.round_trips = 0
        self._count_lock = threading.Lock()

    def execute_command(self, *args: Any, **options: Any) -> Any:
        with self._count_lock:
            self.round_trips += 1
        return super().execute_command(*args, **options)


def seed(env: BenchEnv, topics: int) -> list[tuple[uuid.UUID, int]]:
    with env.uow() as uow:
        org_id = org_for_key(uow=uow, key=env.org_key)
        assert org_id is not None
        result = []
        for i in range(topics):
            view = create_session(uow=uow, org_id=org_id, agent_id="bench", user_id=f"u{i}")
            posted = post_message(
                uow=uow, org_id=org_id, session_id=view.session.id, role="user",
                content=f"We decided to ship release {i} on Friday.",
            )  # fmt: skip
            result.append((posted.topic_id, posted.message.id))
        uow.commit()
    return result


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--parallel", type=int, default=64, help="bursts running at once")
    args = parser.parse_args()
    env = bench_env(args.admin_database_url)
    broker = env.broker_url  # flushed by bench_env
    settings = Settings(
        database_url=env.database_url, redis_url=env.redis_url, broker_url=broker, llm="local"
    )
    app = make_celery(settings)
    import worker.tasks  # noqa: F401  (registers the tasks)

    topics = seed(env, args.topics)
    client = CountingRedis(connection_pool=redis.ConnectionPool.from_url(env.redis_url))
    debouncer = Debouncer(client, debounce_ms=settings.debounce_ms, max_wait_ms=60_000)
    queue = CeleryJobQueue(app)
    rng = random.Random(11)
    plans = [(t, m, [rng.uniform(0, MAX_GAP_S) for _ in range(rng.randint(1, MAX_BURST))])
             for t, m in topics]  # fmt: skip
    last_trigger: dict[uuid.UUID, dt.datetime] = {}
    statuses: Counter[str] = Counter()
    lock = threading.Lock()

    def burst(plan: tuple[uuid.UUID, int, list[float]]) -> None:
        topic_id, last_message_id, gaps = plan
        for gap in gaps:
            sent_at = dt.datetime.now(dt.UTC)  # before: Redis stamps the trigger after this
            status = debounce_trigger(
                debouncer=debouncer, queue=queue, topic_id=topic_id,
                last_message_id=last_message_id, trigger="visibility",
            )  # fmt: skip
            with lock:
                statuses[status] += 1
                last_trigger[topic_id] = sent_at
            time.sleep(gap)

    triggers = sum(len(gaps) for _, _, gaps in plans)
    with start_worker(app, pool="threads", concurrency=8, perform_ping_check=False):
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            list(pool.map(burst, plans))
        trigger_round_trips = client.round_trips
        ids = [t for t, _ in topics]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with env.uow() as uow:
                done = uow.session.scalar(
                    select(func.count(func.distinct(Evaluation.topic_id))).where(
                        Evaluation.topic_id.in_(ids)
                    )
                )
            if done == len(ids):
                break
            time.sleep(0.5)
        time.sleep(3)  # anything extra would have fired by now
        elapsed = time.monotonic() - started
    with env.uow() as uow:
        rows = uow.session.execute(
            select(Evaluation.topic_id, Evaluation.started_at).where(Evaluation.topic_id.in_(ids))
        ).all()
    per_topic = Counter(row.topic_id for row in rows)
    delays = [(row.started_at - last_trigger[row.topic_id]).total_seconds() * 1000 for row in rows]
    distribution = Counter(per_topic[t] for t in ids)
    print(f"bench/debounce: {len(ids)} bursts, {triggers} triggers, {elapsed:.1f} s")
    print(f"  trigger answers: {dict(statuses)}")
    expected = {1: len(ids)}
    print(f"  evaluations per burst: {dict(sorted(distribution.items()))}  (must be {expected})")
    print(
        f"  fire delay after the last trigger: p50 {percentile(delays, 0.5):.0f} ms"
        f"  p99 {percentile(delays, 0.99):.0f} ms  min {min(delays):.0f} ms"
        f"  max {max(delays):.0f} ms  (debounce {settings.debounce_ms} ms)"
    )
    print(
        f"  Redis round trips per trigger (web side): {trigger_round_trips / triggers:.2f}"
        f"  (one EVALSHA; {statistics.fmean(len(g) for _, _, g in plans):.1f} triggers a burst)"
    )


if __name__ == "__main__":
    main()
