"""[4.1] Vectors are per org: one org's embeddings server answering vectors of another size
(or too many numbers for pgvector) fails that org's texts alone, and a search whose query
vector is bad answers by words; an org's own server holds at most its share of slots."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from shared.embeddings.provider import Embedder, EmbeddingsTimeout, make_embedder
from shared.embeddings.query import QueryEmbeddings
from shared.embeddings.slots import OWN_CALLS
from shared.embeddings.sweep import Cursors, strays
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.held import HeldJobs
from shared.infra.leases import OrgLeases
from shared.infra.queue import EMBED_BATCH, RecordingQueue
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.providers.service import set_provider
from shared.reconcile.claims import Claims
from shared.reconcile.service import reconcile_lost_work
from shared.search.service import SearchQuery, search
from tests.embedding_standin import embedding
from tests.helpers import wait_for
from tests.integration.embeddings.conftest import VectorSystem
from tests.integration.embeddings.standin_env import embeddings_on
from tests.integration.providers.orgs import BOX, new_org, new_uow
from tests.llm_server import FakeOpenAI
from tests.webhook_receiver import Answer as ReceiverAnswer
from tests.webhook_receiver import Receiver

VECTORS_OF = (
    "SELECT count(*) FROM message_vectors v JOIN messages m ON m.id = v.message_id"
    " WHERE m.session_id = :sid"
)


def _answer_of(dimensions: int) -> Any:
    """A server whose model answers vectors `dimensions` long."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": embedding(text, dimensions)}
            for i, text in enumerate(texts)
        ]
        usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
        return {"object": "list", "data": data, "model": body["model"], "usage": usage}

    return answer


@pytest.fixture
def own_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _routed(system: VectorSystem) -> Embedder:
    """The workers' embedder: each org's texts to its own server or the fleet's."""
    settings = system.settings.model_copy(update={"webhook_allow_private": True})
    embedder = make_embedder(settings, new_uow=system.unit_of_work, box=BOX)
    assert embedder is not None
    # The sweeps start past earlier tests' messages (the database is the session's).
    Cursors(system.redis, embedder.model).set_messages(
        system.rows("SELECT coalesce(max(id), 0) FROM messages")[0][0]
    )
    return embedder


def _sweep(system: VectorSystem, embedder: Embedder) -> Any:
    return system.sweep(embedder)


def _count(system: VectorSystem, sid: str) -> int:
    return int(system.rows(VECTORS_OF, sid=sid)[0][0])


@pytest.mark.parametrize("dimensions", [32, 20_000])
def test_an_orgs_server_answering_another_size_fails_its_texts_alone_41(
    vectors: VectorSystem, own_server: FakeOpenAI, dimensions: int,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    # A worker run by an earlier test leaves the root logger at its level (ERROR).
    caplog.set_level(logging.WARNING, logger="shared.embeddings.batch")
    embedder = _routed(vectors)
    own_auth, org_id = vectors.new_org_with_server(own_server)
    fleets = vectors.new_org()
    first = vectors.session_of(fleets, "The invoices live in PostgreSQL.")
    _sweep(vectors, embedder)  # the model's vectors are 64 long from now on
    assert _count(vectors, first) == 1

    own_server.embeddings_answer_with(_answer_of(dimensions))
    theirs = vectors.session_of(own_auth, "Our deadline is Friday.")
    later = vectors.session_of(fleets, "The car needs new tyres.", "Lisbon in the spring.")
    _sweep(vectors, embedder)

    assert len(own_server.embedding_requests) == 1
    assert _count(vectors, later) == 2  # the other org's vectors of the same sweep
    assert _count(vectors, theirs) == 0
    # One line says which org and why (the org is never a metric's label).
    (line,) = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and str(org_id) in r.getMessage()
    ]
    assert "invalid" in line and ("64" in line or "16000" in line)
    # The cursor moved past all three; the bad org's text is the reconciler's to retry.
    newest = vectors.rows("SELECT max(id) FROM messages")[0][0]
    assert Cursors(vectors.redis, embedder.model).messages() == newest
    with vectors.unit_of_work() as uow:
        left = strays(
            uow=uow, redis_client=vectors.redis, model=embedder.model,
            grace=dt.timedelta(0), limit=100,
        )  # fmt: skip
    theirs_ids = [row[0] for row in vectors.rows(
        "SELECT id FROM messages WHERE session_id = :sid", sid=theirs
    )]  # fmt: skip
    assert theirs_ids and set(theirs_ids) <= set(left.message_ids)
    # The reconciler sends them again once, not at every run (its claims), so a broken
    # server costs a call now and then, not a loop.
    claims, sent = Claims(vectors.redis, ttl_s=60), []
    for _ in range(3):
        with UnitOfWork(vectors.factory, RecordingQueue()) as uow:
            reconcile_lost_work(
                uow=uow, cache=MemoryCache(vectors.redis), claims=claims,
                held=HeldJobs(vectors.redis),
                now=dt.datetime.now(dt.UTC), grace=dt.timedelta(0), drift_interval=1000,
                redis_client=vectors.redis, embedding_model=embedder.model,
            )  # fmt: skip
            uow.commit()
        claims.record_sent(uow.sent)
        sent += [
            i for job in uow.sent if job.task == EMBED_BATCH
            for i in job.kwargs["message_ids"] if i in theirs_ids
        ]  # fmt: skip
    assert sent == theirs_ids


def test_a_models_first_vectors_take_their_size_from_the_fleet_not_an_orgs_server_41(
    vectors: VectorSystem, own_server: FakeOpenAI, fake_openai: FakeOpenAI
) -> None:
    embedder = _routed(vectors)
    own_auth, _ = vectors.new_org_with_server(own_server)
    own_server.embeddings_answer_with(_answer_of(32))
    theirs = vectors.session_of(own_auth, "Our deadline is Friday.")
    _sweep(vectors, embedder)  # nothing of this model stored yet, only the org's texts

    assert _count(vectors, theirs) == 0  # 32 long: not the fleet's 64
    assert [r["input"] for r in fake_openai.embedding_requests] == [["driftless"]]
    fleets = vectors.new_org()
    later = vectors.session_of(fleets, "The car needs new tyres.")
    _sweep(vectors, embedder)
    assert _count(vectors, later) == 1


def test_an_org_at_its_cap_of_own_server_calls_leaves_its_texts_for_later_41(
    vectors: VectorSystem, own_server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shared.embeddings.batch")
    embedder = _routed(vectors)
    own_auth, org_id = vectors.new_org_with_server(own_server)
    fleets = vectors.new_org()
    theirs = vectors.session_of(own_auth, "Our deadline is Friday.")
    others = vectors.session_of(fleets, "The invoices live in PostgreSQL.")
    leases = OrgLeases(vectors.redis, kind=OWN_CALLS, lease_s=60)
    held = [
        leases.acquire(org_id=org_id, limit=1000)
        for _ in range(vectors.settings.embeddings_per_org)
    ]
    try:
        _sweep(vectors, embedder)
    finally:
        for lease_id in held:
            assert lease_id is not None
            leases.release(org_id=org_id, lease_id=lease_id)

    assert own_server.embedding_requests == []  # not sent: no slot waited for
    assert _count(vectors, theirs) == 0 and _count(vectors, others) == 1
    assert any(str(org_id) in r.getMessage() and "cap" in r.getMessage() for r in caplog.records)
    newest = vectors.rows("SELECT max(id) FROM messages")[0][0]
    assert Cursors(vectors.redis, embedder.model).messages() == newest


@pytest.mark.parametrize("dimensions", [32, 20_000])
def test_a_query_vector_of_another_size_answers_by_words_and_is_not_cached_41(
    vectors: VectorSystem, fake_openai: FakeOpenAI, dimensions: int
) -> None:
    auth = vectors.new_org()
    vectors.session_of(auth, "We ship the billing stack on Friday.")
    _sweep(vectors, vectors.embedder)
    fake_openai.embeddings_answer_with(_answer_of(dimensions))
    keys_before = set(vectors.redis.scan_iter("driftless:query-embedding*"))

    for n in range(3):
        answer = vectors.client.get(
            "/agents-api/search",
            query_string={"agentId": "agent-1", "userId": "ada", "q": f"billing stack {n}"},
            headers=auth,
        )
        assert answer.status_code == 200, answer.json
        assert answer.json["mode"] == "lexical"
        assert [hit["snippet"] for hit in answer.json["results"]][:1] == [
            "We ship the billing stack on Friday."
        ]
    assert set(vectors.redis.scan_iter("driftless:query-embedding*")) == keys_before


def test_the_query_vector_cache_holds_a_bounded_number_per_org_41(
    vectors: VectorSystem, session_factory: sessionmaker[Session]
) -> None:
    queries = QueryEmbeddings(vectors.embedder, vectors.redis, max_entries=3)
    org, other = uuid.uuid4(), uuid.uuid4()
    queries.vector("kept apart", org_id=other)
    for n in range(8):
        assert queries.vector(f"question number {n}", org_id=org) == embedding(
            f"question number {n}"
        )

    assert queries.cached_count(org) == 3
    assert queries.cached_count(other) == 1


def test_an_orgs_own_server_trickling_its_answer_is_cut_off_at_the_calls_deadline_41(
    settings: Settings, session_factory: sessionmaker[Session], fake_openai: FakeOpenAI
) -> None:
    """Each byte well within a per-read timeout; the whole head past ten deadlines."""
    deadline_s, trickle_s = 1.0, 0.25
    embedding_settings = embeddings_on(settings, fake_openai).model_copy(
        update={"llm_timeout_s": deadline_s}
    )
    with Receiver() as trickling:
        trickling.answer_with(lambda _request, _n: ReceiverAnswer(200, trickle_s=trickle_s))
        org = new_org(session_factory, server=None)
        with new_uow(session_factory) as uow:
            set_provider(
                uow=uow, org_id=org, base_url=trickling.url + "/v1", api_key="sk-own",
                model="org-chat", box=BOX, allow_private=True,
            )  # fmt: skip
            uow.commit()
        embedder = make_embedder(
            embedding_settings, new_uow=lambda: new_uow(session_factory), box=BOX
        )
        assert embedder is not None

        with pytest.raises(EmbeddingsTimeout):
            embedder.embed(["billing"], org_id=org)

        (trickle,) = wait_for(
            lambda: trickling.trickles if all(t.ended for t in trickling.trickles) else None,
            timeout=10, what="the trickle to end",
        )  # fmt: skip
        assert trickle.total * trickle_s > 10 * deadline_s
        assert trickle.broken and trickle.sent * trickle_s < 3 * deadline_s


def test_a_query_vector_of_the_configured_size_but_not_the_stored_ones_is_lexical_41(
    vectors: VectorSystem,
) -> None:
    """DRIFTLESS_EMBEDDINGS_DIMENSIONS changed under the same model: the stored vectors
    are what a search compares the query's with."""
    auth = vectors.new_org()
    sid = vectors.session_of(auth, "We ship the billing stack on Friday.")
    _sweep(vectors, vectors.embedder)  # 64 long
    shorter = make_embedder(vectors.settings.model_copy(update={"embeddings_dimensions": 16}))
    assert shorter is not None
    org = vectors.rows("SELECT org_id FROM sessions WHERE id = :sid", sid=sid)[0][0]

    with vectors.unit_of_work() as uow:
        found = search(
            uow=uow, vectors=QueryEmbeddings(shorter, vectors.redis),
            query=SearchQuery(scope=Scope(org_id=org, agent_id="agent-1", user_id="ada"),
                              q="billing stack", kind="message"),
        )  # fmt: skip

    assert found.mode == "lexical"
    assert [hit.snippet for hit in found.hits] == ["We ship the billing stack on Friday."]
