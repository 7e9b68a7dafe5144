"""bench/context: context assembly for a topic of 100 vs 10,000 messages (R2).

Both sessions belong to a scope with 50 promoted topics in memory. Each sample is one
full assembly (service + rendering, on the machine's PostgreSQL and Redis, memory
block from the Redis cache after the first read), and one through the HTTP endpoint
(Flask test client: auth, validation, serialization). Prints p50/p95 and the ratio.

    .venv/bin/python -m bench.context [--iterations 300]
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from sqlalchemy import text

from bench.common import BenchEnv, arguments, bench_env, describe, percentile
from shared.agents.service import put_agent
from shared.auth.service import org_for_key
from shared.context.render import render
from shared.context.service import ContextOptions, assemble_context
from shared.sessions.service import create_session

AGENT, USER = "planner", "ada"
SUMMARY = (
    "Billing stack (PostgreSQL 16, Celery on Redis; no cron on web hosts); invoices in EUR;"
    " migration deadline March 3; owner: Ada."
)


def seed(env: BenchEnv, sizes: list[int]) -> tuple[uuid.UUID, dict[int, uuid.UUID]]:
    with env.uow() as uow:
        org_id = org_for_key(uow=uow, key=env.org_key)
        assert org_id is not None
        put_agent(
            uow=uow, org_id=org_id, agent_id=AGENT, soul="You are Planner, terse and exact.",
            skills=["sql", "billing"], tools=[],
        )  # fmt: skip
        # 50 promoted topics, one closed session each, as months of earlier work leave.
        for i in range(50):
            view = create_session(uow=uow, org_id=org_id, agent_id=AGENT, user_id=USER)
            uow.session.execute(
                text(
                    "UPDATE topics SET status = 'closed', keep_in_memory = true,"
                    " title = :title, summary = :summary WHERE id = :id"
                ),
                {"title": f"Decision {i}", "summary": SUMMARY, "id": view.topics[0].id},
            )
            create_session(uow=uow, org_id=org_id, agent_id=AGENT, user_id=USER)  # keeps R4
        sessions = {}
        for size in sizes:
            view = create_session(uow=uow, org_id=org_id, agent_id=AGENT, user_id=USER)
            topic_id = view.topics[0].id
            uow.session.execute(
                text(
                    "INSERT INTO messages (session_id, topic_id, role, content)"
                    " SELECT :s, :t, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,"
                    " 'message ' || g || ': ' || repeat('lorem ipsum ', 12)"
                    " FROM generate_series(1, :n) g"
                ),
                {"s": view.session.id, "t": topic_id, "n": size},
            )
            uow.session.execute(
                text(
                    "UPDATE topics SET message_count = :n,"
                    " last_message_id = (SELECT max(id) FROM messages WHERE topic_id = :t)"
                    " WHERE id = :t"
                ),
                {"n": size, "t": topic_id},
            )
            sessions[size] = view.session.id
        uow.commit()
    with env.engine.connect() as connection:
        connection.execute(text("ANALYZE"))
        connection.commit()
    return org_id, sessions


def service_call(env: BenchEnv, org_id: uuid.UUID) -> Callable[[uuid.UUID], None]:
    options = ContextOptions()

    def assemble(session_id: uuid.UUID) -> None:
        with env.uow() as uow:
            stack = assemble_context(
                uow=uow, client=env.redis, org_id=org_id, session_id=session_id, options=options
            )
        render(stack)

    return assemble


def http_call(env: BenchEnv) -> Callable[[uuid.UUID], None]:
    from shared.infra.config import Settings
    from shared.infra.queue import RecordingQueue
    from web.app import create_app

    settings = Settings(database_url=env.database_url, redis_url=env.redis_url)
    client = create_app(settings, queue=RecordingQueue()).test_client()
    headers = {"Authorization": f"Bearer {env.org_key}"}

    def get(session_id: uuid.UUID) -> None:
        response = client.get(f"/agents-api/sessions/{session_id}/context", headers=headers)
        assert response.status_code == 200

    return get


def interleaved(
    call: Callable[[uuid.UUID], None], sessions: dict[int, uuid.UUID], n: int
) -> dict[int, list[float]]:
    """Alternate the sizes sample by sample, so drift in the machine hits both alike."""
    samples: dict[int, list[float]] = {size: [] for size in sessions}
    for _ in range(n):
        for size, session_id in sessions.items():
            started = time.perf_counter()
            call(session_id)
            samples[size].append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    env = bench_env(args.admin_database_url)
    sizes = [100, 10_000]
    org_id, sessions = seed(env, sizes)
    results: dict[str, dict[int, list[float]]] = {}
    for path, call in (("service", service_call(env, org_id)), ("http", http_call(env))):
        interleaved(call, sessions, 30)  # warm: connection pool, memory cache, query plans
        results[path] = interleaved(call, sessions, args.iterations)
    print("context assembly, 50 promoted topics in memory (machine PostgreSQL + Redis)")
    for path, by_size in results.items():
        for size in sizes:
            print(f"  {path:<8} topic of {size:>6,} messages: {describe(by_size[size])}")
        p50 = {size: percentile(by_size[size], 0.5) for size in sizes}
        p95 = {size: percentile(by_size[size], 0.95) for size in sizes}
        print(
            f"  {path:<8} ratio 10,000 ÷ 100: p50 {p50[10_000] / p50[100]:.2f}"
            f"   p95 {p95[10_000] / p95[100]:.2f}"
        )


if __name__ == "__main__":
    main()
