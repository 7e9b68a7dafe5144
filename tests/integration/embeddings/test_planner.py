"""[4.2] Vectors at ingest speed: beat's tick only plans, sending a job per org and run of
ids that any worker runs; one org's slow or failing server holds no other org's vectors,
a job run twice writes nothing new, and the lag is a gauge."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import text

from shared.embeddings.provider import make_embedder
from shared.embeddings.sweep import EMBED_TICK_S, Cursors, strays
from shared.infra.queue import EMBED_NEW, EMBED_PENDING, Job
from tests.embedding_standin import embedding
from tests.helpers import wait_for
from tests.integration.embeddings.conftest import VectorSystem
from tests.integration.providers.orgs import BOX
from tests.llm_server import FakeOpenAI
from worker.embeddings_metrics import EMBEDDINGS_LAG, embeddings_lag_collector

STORED_AT = (
    "SELECT v.created_at FROM message_vectors v JOIN messages m ON m.id = v.message_id"
    " WHERE m.session_id = :sid ORDER BY v.created_at"
)


@pytest.fixture
def own_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def system(vectors: VectorSystem) -> VectorSystem:
    """Orgs' own servers on 127.0.0.1 allowed; the ticks start past earlier tests' texts."""
    vectors.settings = vectors.settings.model_copy(update={"webhook_allow_private": True})
    newest = vectors.rows("SELECT coalesce(max(id), 0) FROM messages")[0][0]
    cursors = Cursors(vectors.redis, vectors.embedder.model)
    cursors.set_messages(newest)
    cursors.set_lag(newest, None)  # and so does the lag's walk
    return vectors


def _ids(system: VectorSystem, sid: str) -> set[int]:
    rows = system.rows("SELECT id FROM messages WHERE session_id = :sid", sid=sid)
    return {row[0] for row in rows}


def _vectors_of(answered: threading.Event) -> Any:
    """An org's server that answers once `answered` is set (the test's word, not a clock)."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        assert answered.wait(60)
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = [{"object": "embedding", "index": i, "embedding": embedding(content)}
                for i, content in enumerate(texts)]  # fmt: skip
        return {"object": "list", "data": data, "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1}}  # fmt: skip

    return answer


def test_a_slow_orgs_server_holds_no_other_orgs_vectors_its_jobs_run_beside_them_42(
    system: VectorSystem, own_server: FakeOpenAI, fake_openai: FakeOpenAI
) -> None:
    """Goal 1: a tick's texts are per-org jobs that the worker's slots run at once."""
    answered = threading.Event()
    own_server.embeddings_answer_with(_vectors_of(answered))
    slow_auth, _ = system.new_org_with_server(own_server)
    theirs = system.session_of(slow_auth, "Our deadline is Friday.")
    others = system.session_of(system.new_org(), "The invoices live in PostgreSQL.", "Lisbon.")
    with system.worker() as app:
        ticks = iter(range(100_000))

        def stored(sid: str, count: int) -> bool:
            if next(ticks) % int(EMBED_TICK_S / 0.05) == 0:  # as beat sends them
                system.send(app, Job(EMBED_PENDING))
            return len(system.rows(STORED_AT, sid=sid)) == count

        # The other org's vectors are stored while the slow org's call is still waiting.
        wait_for(lambda: stored(others, 2), timeout=60, what="the other org's vectors")
        assert len(own_server.embedding_requests) == 1
        assert system.rows(STORED_AT, sid=theirs) == []
        answered.set()
        wait_for(lambda: stored(theirs, 1), timeout=60, what="the slow org's vector")
    # Each org's texts went to its own server in its own call.
    assert [r["input"] for r in own_server.embedding_requests] == [["Our deadline is Friday."]]
    fleet_inputs = [one for r in fake_openai.embedding_requests for one in r["input"]]
    assert "Our deadline is Friday." not in fleet_inputs
    assert max(system.rows(STORED_AT, sid=others))[0] < system.rows(STORED_AT, sid=theirs)[0][0]


def test_a_tick_sends_a_job_per_org_and_run_of_ids_and_moves_its_cursor_42(
    system: VectorSystem,
) -> None:
    first = system.session_of(system.new_org(), "One.", "Two.", "Three.")
    second = system.session_of(system.new_org(), "Four.")
    planned, jobs = system.plan()
    assert (planned.messages, planned.jobs) == (4, 2)
    assert all(job.task == EMBED_NEW for job in jobs)
    assert [set(job.kwargs["message_ids"]) for job in jobs] == [
        _ids(system, first), _ids(system, second)
    ]  # fmt: skip
    newest = system.rows("SELECT max(id) FROM messages")[0][0]
    assert Cursors(system.redis, system.embedder.model).messages() == newest
    again, no_jobs = system.plan()  # nothing new since: nothing planned twice
    assert (again.messages, no_jobs) == (0, [])


def test_a_job_run_twice_calls_and_writes_nothing_the_second_time_42(
    system: VectorSystem, fake_openai: FakeOpenAI
) -> None:
    """Goal 1: a job redelivered (acks_late) after it ran finds its texts embedded."""
    sid = system.session_of(system.new_org(), "The invoices live in PostgreSQL.", "Lisbon.")
    _, (job,) = system.plan()
    assert system.run(job).messages == 2
    stored, calls = system.rows(STORED_AT, sid=sid), len(fake_openai.embedding_requests)
    again = system.run(job)
    assert (again.messages, again.failed_messages) == (0, 0)
    assert len(fake_openai.embedding_requests) == calls
    assert system.rows(STORED_AT, sid=sid) == stored


def test_an_orgs_own_server_failing_fails_its_job_alone_and_leaves_its_texts_to_the_reconciler_42(
    system: VectorSystem, own_server: FakeOpenAI
) -> None:
    own_server.embeddings_fail(500)
    failing_auth, _ = system.new_org_with_server(own_server)
    theirs = system.session_of(failing_auth, "Our deadline is Friday.")
    others = system.session_of(system.new_org(), "The invoices live in PostgreSQL.")
    embedder = make_embedder(system.settings, new_uow=system.unit_of_work, box=BOX)
    assert embedder is not None
    _, jobs = system.plan(embedder)
    results = [system.run(job, embedder) for job in jobs]  # neither raises: no retry
    assert sorted((r.messages, r.failed_messages) for r in results) == [(0, 1), (1, 0)]
    assert len(system.rows(STORED_AT, sid=others)) == 1
    with system.unit_of_work() as uow:
        left = strays(
            uow=uow, redis_client=system.redis, model=embedder.model, grace=dt.timedelta(0),
            limit=100,
        )  # fmt: skip
    assert _ids(system, theirs) <= set(left.message_ids)


def _lag(system: VectorSystem) -> float:
    registry = CollectorRegistry()
    registry.register(embeddings_lag_collector(system.redis, system.embedder.model))
    value = registry.get_sample_value(EMBEDDINGS_LAG)
    assert value is not None
    return value


def test_the_lag_is_the_age_of_the_oldest_message_without_a_vector_42(
    system: VectorSystem,
) -> None:
    """Goal 3: driftless_embeddings_lag_seconds, as beat's tick measures it."""
    sid = system.session_of(system.new_org(), "The invoices live in PostgreSQL.", "Lisbon.")
    with system.unit_of_work() as uow:
        uow.session.execute(
            text(
                "UPDATE messages SET created_at = now() - interval '1 hour' WHERE session_id = :s"
            ),
            {"s": sid},
        )
        uow.commit()
    _, jobs = system.plan()  # planned, not yet run: an hour behind
    assert 3600 <= _lag(system) < 3600 + 600
    for job in jobs:
        system.run(job)
    system.plan()  # every message has its vector now
    assert _lag(system) == 0.0
    low = Cursors(system.redis, system.embedder.model).low_water()
    assert low >= max(_ids(system, sid))  # the next tick starts its walk past them
