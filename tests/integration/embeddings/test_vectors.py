"""Vectors made by workers after the commit, in batches, on a real PostgreSQL with pgvector;
erasure and retention take them with their rows; without pgvector the feature is off."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text

from shared.embeddings.backfill import send_batches
from shared.embeddings.provider import EmbeddingsError
from shared.embeddings.schema import MESSAGE_VECTORS, hnsw_index_name, indexed_distance
from shared.embeddings.store import nearest_messages, store_message_vectors, vector_literal
from shared.embeddings.sweep import EMBED_TICK_S
from shared.erasure.service import erase_user_everywhere
from shared.infra.config import Settings
from shared.infra.held import HeldJobs
from shared.infra.queue import EMBED_BATCH, EMBED_PENDING, Job, RecordingQueue
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.reconcile.claims import Claims
from shared.reconcile.service import reconcile_lost_work
from shared.retention.service import purge_idle_sessions
from tests.embedding_standin import embedding
from tests.helpers import new_session, post_message, wait_for
from tests.integration.embeddings.conftest import VectorSystem
from tests.llm_server import FakeOpenAI

VECTORS_OF = (
    "SELECT v.message_id, v.model FROM message_vectors v JOIN messages m ON m.id = v.message_id"
    " WHERE m.session_id = :sid ORDER BY v.message_id"
)


def _conversation(system: VectorSystem, auth: dict[str, str], user: str = "user-1") -> str:
    session = new_session(system.client, auth, user=user)
    for role, content in (
        ("user", "Which database holds the invoices?"),
        ("assistant", "PostgreSQL holds the invoices."),
        ("user", "The deadline is Friday."),
    ):
        post_message(system.client, auth, session["id"], content, role=role)
    return str(session["id"])


def _run_sweep(system: VectorSystem) -> Any:
    return system.sweep()


def _embedded_by_a_worker(system: VectorSystem, sid: str, messages: int) -> list[Any]:
    """The session's vectors once a real worker has made all `messages` of them."""
    with system.worker() as app:
        ticks = iter(range(1_000))

        def all_of_them() -> list[Any] | None:
            # What beat sends every EMBED_TICK_S: a tick passes only what has settled.
            if next(ticks) % int(EMBED_TICK_S / 0.05) == 0:
                system.send(app, Job(EMBED_PENDING))
            rows = system.rows(VECTORS_OF, sid=sid)
            return rows if len(rows) == messages else None

        return wait_for(all_of_them, timeout=30, what="the session's vectors")


def test_posting_embeds_nothing_and_a_workers_sweep_embeds_the_batch_in_one_call(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    sid = _conversation(vectors, vectors.new_org())
    assert fake_openai.embedding_requests == []  # never in the post path
    assert vectors.rows(VECTORS_OF, sid=sid) == []
    stored = _embedded_by_a_worker(vectors, sid, 3)
    assert {model for _, model in stored} == {vectors.embedder.model}
    # One call for the batch (this org's texts), and the nearest is the matching message.
    assert any(len(r["input"]) >= 3 for r in fake_openai.embedding_requests)
    with vectors.unit_of_work() as uow:
        near = nearest_messages(
            uow=uow, model=vectors.embedder.model, query=embedding("invoices database"),
            session_ids=[uuid.UUID(sid)], limit=1,
        )  # fmt: skip
        content = uow.session.execute(
            text("SELECT content FROM messages WHERE id = :id"), {"id": near[0].id}
        ).scalar()
    assert "invoices" in str(content)


def test_a_second_sweep_embeds_nothing_again(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    sid = _conversation(vectors, vectors.new_org())
    _run_sweep(vectors)
    calls = len(fake_openai.embedding_requests)
    again = _run_sweep(vectors)
    assert (again.messages, again.failed_messages) == (0, 0)
    assert len(fake_openai.embedding_requests) == calls
    assert len(vectors.rows(VECTORS_OF, sid=sid)) == 3


def test_a_failing_server_fails_the_job_for_its_retry_42(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    sid = _conversation(vectors, vectors.new_org())
    _, jobs = vectors.plan()
    ours = [job for job in jobs if set(job.kwargs["message_ids"]) & _ids_of(vectors, sid)]
    assert len(ours) == 1  # one org's three messages: one job
    fake_openai.embeddings_fail(500)
    with pytest.raises(EmbeddingsError):  # Celery retries it, with a backoff
        vectors.run(ours[0])
    assert vectors.rows(VECTORS_OF, sid=sid) == []
    fake_openai.reset()
    assert vectors.run(ours[0]).messages == 3  # the retry
    assert len(vectors.rows(VECTORS_OF, sid=sid)) == 3


def _ids_of(system: VectorSystem, sid: str) -> set[int]:
    return {
        row[0] for row in system.rows("SELECT id FROM messages WHERE session_id = :sid", sid=sid)
    }


def test_a_topic_is_embedded_again_when_its_summary_changes(vectors: VectorSystem) -> None:
    sid = _conversation(vectors, vectors.new_org())
    topic_of = "SELECT source_hash, embedding::text FROM topic_vectors v JOIN topics t ON t.id = v.topic_id WHERE t.session_id = :sid"  # noqa: E501
    summarize = (
        "UPDATE topics SET title = :title, summary = :summary, summarized_at = now()"
        " WHERE session_id = :sid"
    )
    with vectors.unit_of_work() as uow:
        uow.session.execute(
            text(summarize), {"title": "Invoices", "summary": "PostgreSQL.", "sid": sid}
        )
        uow.commit()
    _run_sweep(vectors)
    ((first_hash, first),) = vectors.rows(topic_of, sid=sid)
    with vectors.unit_of_work() as uow:
        uow.session.execute(
            text(summarize), {"title": "Deadline", "summary": "Friday.", "sid": sid}
        )
        uow.commit()
    _run_sweep(vectors)
    ((second_hash, second),) = vectors.rows(topic_of, sid=sid)
    assert second_hash != first_hash and second != first


def test_backfill_batches_replace_another_models_vectors_in_the_bulk_queue(
    vectors: VectorSystem,
) -> None:
    sid = _conversation(vectors, vectors.new_org())
    _run_sweep(vectors)
    new_model = vectors.settings.model_copy(update={"embeddings_model": "emb-next"})
    vectors.settings = new_model
    with vectors.worker() as app:
        sender = CeleryQueueOf(vectors, app)
        sent = send_batches(new_uow=sender, model="emb-next")
        assert sent >= 1
        wait_for(
            lambda: {m for _, m in vectors.rows(VECTORS_OF, sid=sid)} == {"emb-next"},
            timeout=30, what="the new model's vectors",
        )  # fmt: skip
    assert len(vectors.rows(VECTORS_OF, sid=sid)) == 3  # replaced, not added


def CeleryQueueOf(system: VectorSystem, app: Any) -> Any:
    from shared.infra.db.uow import UnitOfWork
    from shared.infra.queue import CeleryJobQueue

    return lambda: UnitOfWork(system.factory, CeleryJobQueue(app))


def test_the_reconciler_sends_a_batch_for_messages_the_sweep_passed(vectors: VectorSystem) -> None:
    sid = _conversation(vectors, vectors.new_org())
    model = vectors.embedder.model
    _run_sweep(vectors)
    # A message the sweep passed without its vector (an org's own server failed).
    with vectors.unit_of_work() as uow:
        uow.session.execute(
            text("DELETE FROM message_vectors WHERE message_id = (SELECT min(id) FROM messages"
                 " WHERE session_id = :sid)"), {"sid": sid},
        )  # fmt: skip
        uow.session.execute(
            text(
                "UPDATE messages SET created_at = now() - interval '1 hour' WHERE session_id = :sid"
            ),
            {"sid": sid},
        )
        uow.commit()
    queue = RecordingQueue()
    from shared.infra.db.uow import UnitOfWork

    with UnitOfWork(vectors.factory, queue) as uow:
        reconciled = reconcile_lost_work(
            uow=uow, cache=MemoryCache(vectors.redis), claims=Claims(vectors.redis, ttl_s=2),
            held=HeldJobs(vectors.redis),
            now=dt.datetime.now(dt.UTC), grace=dt.timedelta(seconds=1), drift_interval=1000,
            redis_client=vectors.redis, embedding_model=model,
        )  # fmt: skip
        uow.commit()
    assert reconciled.message_vectors == 1
    (job,) = [j for j in queue.sent if j.task == EMBED_BATCH]
    assert len(job.kwargs["message_ids"]) == 1


def test_erasure_of_a_user_and_retention_of_a_session_leave_no_vectors(
    vectors: VectorSystem,
) -> None:
    auth = vectors.new_org()
    erased_sid = _conversation(vectors, auth, user="ada")
    idle_sid = _conversation(vectors, auth, user="bob")
    with vectors.unit_of_work() as uow:
        uow.session.execute(
            text("UPDATE topics SET title = 't', summary = 's', summarized_at = now(),"
                 " summarized_through_id = last_message_id")
        )  # fmt: skip
        uow.commit()
    _run_sweep(vectors)
    assert len(vectors.rows(VECTORS_OF, sid=erased_sid)) == 3
    assert len(vectors.rows(VECTORS_OF, sid=idle_sid)) == 3
    with vectors.unit_of_work() as uow:
        org_id = uow.session.execute(
            text("SELECT org_id FROM sessions WHERE id = :sid"), {"sid": erased_sid}
        ).scalar_one()
    erase_user_everywhere(
        new_uow=vectors.unit_of_work, redis_client=vectors.redis,
        scope=Scope(org_id=org_id, agent_id="agent-1", user_id="ada"),
    )  # fmt: skip
    by_session = "SELECT count(*) FROM {} WHERE session_id = :sid"
    assert vectors.rows(by_session.format("message_vectors"), sid=erased_sid) == [(0,)]
    assert vectors.rows(by_session.format("topic_vectors"), sid=erased_sid) == [(0,)]
    with vectors.unit_of_work() as uow:
        uow.session.execute(
            text(
                "UPDATE sessions SET last_activity_at = now() - interval '40 days' WHERE id = :sid"
            ),
            {"sid": idle_sid},
        )
        uow.commit()
    purged = purge_idle_sessions(
        new_uow=vectors.unit_of_work, now=dt.datetime.now(dt.UTC), retention=dt.timedelta(days=30)
    )
    assert purged.messages == 3
    assert vectors.rows(by_session.format("message_vectors"), sid=idle_sid) == [(0,)]
    # The topic keeps its title and summary, and so the vector made of them.
    assert vectors.rows(by_session.format("topic_vectors"), sid=idle_sid) == [(1,)]


# --- a server without pgvector (the machine's PostgreSQL 15) -----------------------------


def test_without_pgvector_migrations_pass_and_readyz_says_embeddings_are_off(
    connection: Connection, settings: Settings, session_factory: Any
) -> None:
    from web.app import create_app

    available = connection.execute(
        text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    if available is not None:
        pytest.fail("this test needs a PostgreSQL without pgvector (the machine's)")
    tables = connection.execute(
        text(
            "SELECT count(*) FROM pg_tables WHERE tablename IN ('message_vectors', 'topic_vectors')"
        )
    ).scalar()
    assert tables == 0  # the suite's database was migrated to head all the same
    on = settings.model_copy(update={"embeddings": "openai"})
    client: FlaskClient = create_app(
        on, queue=RecordingQueue(), session_factory=session_factory
    ).test_client()
    response = client.get("/readyz")
    assert response.status_code == 200
    body: Any = response.json
    assert body["status"] == "ok"
    assert body["checks"]["embeddings"] == (
        "off: the PostgreSQL server has no 'vector' extension (pgvector)"
    )


def test_with_pgvector_readyz_says_embeddings_are_on(vectors: VectorSystem) -> None:
    body: Any = vectors.client.get("/readyz").json
    assert body["checks"]["embeddings"] == "ok"


def test_with_pgvector_the_models_and_migrations_still_agree(
    vector_database_url: str,
) -> None:
    from shared.embeddings.schema import ensure_vector_schema_at
    from shared.models import check

    check(vector_database_url)  # the vector tables are no model's, and not a difference
    assert ensure_vector_schema_at(vector_database_url)  # again: idempotent


def test_a_model_past_2000_dimensions_gets_a_half_precision_hnsw_index_that_a_walk_uses(
    vectors: VectorSystem,
) -> None:
    # text-embedding-3-large's size: past what a single-precision HNSW index takes.
    model, dimensions = f"{vectors.prefix}large-3072", 3072
    sid = _conversation(vectors, vectors.new_org())
    ids = [row[0] for row in vectors.rows("SELECT id FROM messages WHERE session_id = :s", s=sid)]
    with vectors.unit_of_work() as uow:
        store_message_vectors(
            uow=uow, model=model,
            vectors=[(i, [1.0 if d % len(ids) == n else 0.0 for d in range(dimensions)])
                     for n, i in enumerate(ids)],
        )  # fmt: skip
        uow.commit()
    index = hnsw_index_name(MESSAGE_VECTORS, model, dimensions)
    (definition,) = vectors.rows("SELECT indexdef FROM pg_indexes WHERE indexname = :i", i=index)
    assert "halfvec(3072)" in definition[0] and "halfvec_cosine_ops" in definition[0]
    with vectors.unit_of_work() as uow:
        uow.session.execute(text("SET LOCAL enable_seqscan = off"))
        plan = uow.session.execute(
            text(f"EXPLAIN SELECT message_id FROM message_vectors WHERE model = :model"
                 f" ORDER BY {indexed_distance(dimensions)} LIMIT 2"),
            {"model": model, "vector": vector_literal([1.0] + [0.0] * (dimensions - 1))},
        ).all()  # fmt: skip
    assert index in "\n".join(row[0] for row in plan)


def test_a_messages_vector_is_made_from_its_speakers_name_and_its_text_43(
    vectors: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    auth = vectors.new_org()
    session = new_session(vectors.client, auth)
    turns = [
        {"role": "user", "name": "Caroline", "content": "I researched adoption agencies."},
        {"role": "assistant", "content": "How did it go?"},
    ]
    posted = vectors.client.post(
        f"/agents-api/sessions/{session['id']}/messages", json={"messages": turns}, headers=auth
    )
    assert posted.status_code == 201, posted.json
    sid = str(session["id"])
    _embedded_by_a_worker(vectors, sid, 2)
    sent = {text for r in fake_openai.embedding_requests for text in r["input"]}
    # As a transcript writes a turn: the name, a colon, the text; no name, the text alone.
    assert {"Caroline: I researched adoption agencies.", "How did it go?"} <= sent
    with vectors.unit_of_work() as uow:
        (near,) = nearest_messages(
            uow=uow, model=vectors.embedder.model, query=embedding("Caroline"),
            session_ids=[uuid.UUID(sid)], limit=1,
        )  # fmt: skip
        name = uow.session.execute(
            text("SELECT name FROM messages WHERE id = :id"), {"id": near.id}
        ).scalar()
    assert name == "Caroline"  # her name alone is nearest her turn
