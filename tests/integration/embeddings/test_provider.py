"""Texts' vectors from an OpenAI-compatible server: in input order, batched, of the asked
length, checked, and every failure one EmbeddingsError."""

from __future__ import annotations

import math
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from shared.bootstrap import Runtime
from shared.embeddings.provider import (
    EmbeddingsError,
    EmbeddingsTimeout,
    OpenAIEmbedder,
    OrgRoutedEmbedder,
    make_embedder,
)
from shared.infra.config import Settings, load_settings
from tests.embedding_standin import cosine, embedding
from tests.integration.embeddings.standin_env import MODEL, embeddings_on
from tests.llm_server import FakeOpenAI

TEXTS = ["Postgres for billing", "the billing database is Postgres", "a picnic in the park"]


@pytest.fixture
def embedding_settings(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    return embeddings_on(settings, fake_openai)


def _embedder(settings: Settings) -> Any:
    embedder = make_embedder(settings)
    assert embedder is not None
    return embedder


def test_vectors_come_back_one_per_text_in_order_and_alike_for_alike_texts(
    embedding_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    embedder = _embedder(embedding_settings)

    vectors = embedder.embed(TEXTS)

    assert vectors == [embedding(text) for text in TEXTS]
    assert embedder.embed(TEXTS) == vectors  # deterministic
    assert embedder.model == MODEL
    billing, billing_again, picnic = vectors
    assert cosine(billing, billing_again) > cosine(billing, picnic)
    (request,) = fake_openai.embedding_requests[:1]
    assert request["model"] == MODEL and request["input"] == TEXTS
    assert "dimensions" not in request  # sent only when DRIFTLESS_EMBEDDINGS_DIMENSIONS is
    assert fake_openai.calls == 0 and fake_openai.requests == []  # no chat call among them


def test_vectors_are_in_input_order_even_when_the_answer_is_not(
    embedding_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    def reversed_answer(body: dict[str, Any]) -> dict[str, Any]:
        data = [
            {"object": "embedding", "index": i, "embedding": embedding(text)}
            for i, text in enumerate(body["input"])
        ]
        return {"object": "list", "data": data[::-1], "model": MODEL}

    fake_openai.embeddings_answer_with(reversed_answer)

    assert _embedder(embedding_settings).embed(TEXTS) == [embedding(text) for text in TEXTS]


def test_more_texts_than_a_batch_go_as_several_requests_in_order(
    embedding_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    embedder = _embedder(embedding_settings)
    texts = [f"note number {n}" for n in range(embedder.max_batch * 2 + 3)]

    vectors = embedder.embed(texts)

    assert vectors == [embedding(text) for text in texts]
    sizes = [len(request["input"]) for request in fake_openai.embedding_requests]
    assert sizes == [embedder.max_batch, embedder.max_batch, 3]
    assert embedder.embed([]) == [] and len(fake_openai.embedding_requests) == 3


def test_the_dimensions_setting_is_sent_and_the_answers_length_checked(
    embedding_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    shorter = embedding_settings.model_copy(update={"embeddings_dimensions": 16})

    vectors = _embedder(shorter).embed(TEXTS)

    assert [len(v) for v in vectors] == [16, 16, 16]
    assert vectors[0] == embedding(TEXTS[0], 16)
    assert fake_openai.embedding_requests[0]["dimensions"] == 16

    fake_openai.embeddings_answer_with(  # a server that ignores `dimensions`
        lambda body: {
            "object": "list",
            "model": MODEL,
            "data": [{"object": "embedding", "index": 0, "embedding": embedding("x", 64)}],
        }
    )
    with pytest.raises(EmbeddingsError, match="model's are 16"):
        _embedder(shorter).embed(["x"])


@pytest.mark.parametrize(
    ("status", "retryable"), [(500, True), (429, True), (401, False), (400, False)]
)
def test_a_failing_server_is_an_embeddings_error(
    embedding_settings: Settings, fake_openai: FakeOpenAI, status: int, retryable: bool
) -> None:
    fake_openai.embeddings_fail(status)

    with pytest.raises(EmbeddingsError, match=f"HTTP {status}") as caught:
        _embedder(embedding_settings).embed(TEXTS)
    assert caught.value.retryable is retryable
    assert not isinstance(caught.value, EmbeddingsTimeout)


def test_a_slow_server_past_the_calls_timeout_is_an_embeddings_timeout(
    embedding_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    fake_openai.embeddings_slow(3)

    with pytest.raises(EmbeddingsTimeout):
        _embedder(embedding_settings).embed(["x"], timeout_s=0.2)
    assert len(fake_openai.embedding_requests) == 1  # a deadline is one attempt


def _answer(vectors: list[Any], *, indexes: list[int] | None = None) -> dict[str, Any]:
    indexes = list(range(len(vectors))) if indexes is None else indexes
    data = [
        {"object": "embedding", "index": i, "embedding": v}
        for i, v in zip(indexes, vectors, strict=True)
    ]
    return {"object": "list", "data": data, "model": MODEL}


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (_answer([[0.1, 0.2]]), "1 embeddings answered for 2 inputs"),
        (_answer([[0.1], [0.2]], indexes=[0, 0]), "answered for 2 inputs"),
        (_answer([[0.1, 0.2], [0.3]]), "one non-zero length"),
        (_answer([[], []]), "one non-zero length"),
        (_answer([[0.1, math.nan], [0.1, 0.2]]), "not finite"),
        (_answer([[0.1, "0.2"], [0.1, 0.2]]), "holds str"),
        ({"object": "list", "data": [1, 2], "model": MODEL}, "not a list of embeddings"),
    ],
)
def test_an_answer_that_is_not_one_vector_per_text_is_an_embeddings_error(
    embedding_settings: Settings, fake_openai: FakeOpenAI, answer: dict[str, Any], named: str
) -> None:
    fake_openai.embeddings_answer_with(lambda body: answer)

    with pytest.raises(EmbeddingsError, match=named):
        _embedder(embedding_settings).embed(["one", "two"])


def test_no_embedder_when_embeddings_are_none_the_default(settings: Settings) -> None:
    assert load_settings({}).embeddings == "none"
    assert make_embedder(settings) is None
    assert Runtime(settings).embedder is None


def test_the_embeddings_server_and_key_default_to_the_models() -> None:
    both = load_settings(
        {"DRIFTLESS_EMBEDDINGS": "openai", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    )
    own = load_settings(
        {
            "DRIFTLESS_EMBEDDINGS": "openai",
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "DRIFTLESS_EMBEDDINGS_BASE_URL": "http://127.0.0.1:10/v1",
            "DRIFTLESS_EMBEDDINGS_DIMENSIONS": "256",
        }
    )

    assert str(_embedder(both)._client.base_url) == "http://127.0.0.1:9/v1/"
    assert str(_embedder(own)._client.base_url) == "http://127.0.0.1:10/v1/"
    assert (_embedder(own).model, _embedder(own).dimensions) == ("text-embedding-3-small", 256)


def test_the_bootstrap_routes_the_processes_embedder_by_org(
    embedding_settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    embedder = Runtime(embedding_settings, session_factory=session_factory).embedder

    assert isinstance(embedder, OrgRoutedEmbedder)
    assert isinstance(embedder.fleet, OpenAIEmbedder) and embedder.model == MODEL
