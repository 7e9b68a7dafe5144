"""An org that set its own model (bring your own key) gets its vectors from its own server,
on pinned connections and behind its own breaker; every other org from the fleet's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from shared.embeddings.provider import (
    EmbeddingsError,
    OpenAIEmbedder,
    OrgRoutedEmbedder,
    embedder_builder,
    make_embedder,
)
from shared.embeddings.query import QueryEmbeddings
from shared.infra.config import Settings
from shared.providers.breaker import Breaker
from shared.providers.per_org import OrgClients
from shared.providers.service import delete_provider, set_provider
from tests.embedding_standin import embedding
from tests.integration.embeddings.standin_env import MODEL, clean_redis, embeddings_on
from tests.integration.providers.orgs import BOX, new_org, new_uow
from tests.llm_server import FakeOpenAI


@pytest.fixture
def embedding_settings(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    return embeddings_on(settings, fake_openai)


@pytest.fixture
def own_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _routed(
    settings: Settings, factory: sessionmaker[Session], *, breaker: Breaker | None = None
) -> OrgRoutedEmbedder:
    """As make_embedder builds it, reading the orgs' models at every call."""
    fleet = make_embedder(settings)
    assert isinstance(fleet, OpenAIEmbedder)
    orgs = OrgClients(
        new_uow=lambda: new_uow(factory), box=BOX, build=embedder_builder(settings),
        failure=EmbeddingsError, breaker=breaker, refresh_s=0,
    )  # fmt: skip
    return OrgRoutedEmbedder(fleet, orgs=orgs)


def test_an_orgs_texts_reach_only_its_own_server_and_the_others_the_fleets(
    embedding_settings: Settings,
    session_factory: sessionmaker[Session],
    fake_openai: FakeOpenAI,
    own_server: FakeOpenAI,
) -> None:
    own = new_org(session_factory, server=own_server)
    fleets = new_org(session_factory, server=None)
    embedder = _routed(embedding_settings, session_factory)

    assert embedder.embed(["billing"], org_id=own) == [embedding("billing")]
    embedder.embed(["picnic"], org_id=fleets)
    embedder.embed(["anyone"], org_id=None)

    assert [r["input"] for r in own_server.embedding_requests] == [["billing"]]
    assert [r["input"] for r in fake_openai.embedding_requests] == [["picnic"], ["anyone"]]
    # The fleet's embeddings model on the org's server, not its chat model.
    assert own_server.embedding_requests[0]["model"] == MODEL
    assert own_server.requests == []  # no chat call


def test_the_bootstraps_embedder_routes_by_org_too(
    embedding_settings: Settings,
    session_factory: sessionmaker[Session],
    fake_openai: FakeOpenAI,
    own_server: FakeOpenAI,
) -> None:
    own = new_org(session_factory, server=own_server)
    embedder = make_embedder(embedding_settings, new_uow=lambda: new_uow(session_factory), box=BOX)
    assert embedder is not None

    embedder.embed(["billing"], org_id=own)

    assert len(own_server.embedding_requests) == 1 and fake_openai.embedding_requests == []


def test_a_failing_own_server_opens_its_orgs_breaker_and_no_one_elses(
    embedding_settings: Settings,
    session_factory: sessionmaker[Session],
    fake_openai: FakeOpenAI,
    own_server: FakeOpenAI,
) -> None:
    own_server.embeddings_fail(401)  # a revoked key
    own = new_org(session_factory, server=own_server)
    embedder = _routed(
        embedding_settings, session_factory, breaker=Breaker(threshold=3, cooldown_s=60)
    )

    for _ in range(5):
        with pytest.raises(EmbeddingsError):
            embedder.embed(["billing"], org_id=own)
        assert embedder.embed(["picnic"], org_id=None) == [embedding("picnic")]

    assert len(own_server.embedding_requests) == 3  # then the breaker held them back
    assert len(fake_openai.embedding_requests) == 5


def test_a_private_base_url_is_refused_at_the_connection(
    embedding_settings: Settings, session_factory: sessionmaker[Session], own_server: FakeOpenAI
) -> None:
    """Set while private addresses were allowed (or rebound since): no connection made."""
    own = new_org(session_factory, server=own_server)
    strict = embedding_settings.model_copy(update={"webhook_allow_private": False})

    with pytest.raises(EmbeddingsError, match="not a public address"):
        _routed(strict, session_factory).embed(["billing"], org_id=own)
    assert own_server.embedding_requests == []


def test_a_cached_query_vector_is_never_one_of_the_orgs_former_server(
    embedding_settings: Settings,
    session_factory: sessionmaker[Session],
    redis_url: str,
    fake_openai: FakeOpenAI,
    own_server: FakeOpenAI,
) -> None:
    org = new_org(session_factory, server=None)
    with clean_redis(redis_url) as redis_client:
        queries = QueryEmbeddings(_routed(embedding_settings, session_factory), redis_client)
        queries.vector("billing", org_id=org)
        assert queries.vector("billing", org_id=org) is not None
        assert len(fake_openai.embedding_requests) == 1  # cached

        with new_uow(session_factory) as uow:
            set_provider(
                uow=uow, org_id=org, base_url=own_server.base_url, api_key="sk-own",
                model="org-chat-model", box=BOX, allow_private=True,
            )  # fmt: skip
            uow.commit()
        queries.vector("billing", org_id=org)
        queries.vector("billing", org_id=org)
        assert len(own_server.embedding_requests) == 1  # asked its own server, then cached

        with new_uow(session_factory) as uow:
            delete_provider(uow=uow, org_id=org)
            uow.commit()
        queries.vector("billing", org_id=org)
        assert len(fake_openai.embedding_requests) == 1  # the fleet's vector, cached before
