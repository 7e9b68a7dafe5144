"""The OpenAI-compatible provider, through the real `openai` client, against FakeOpenAI."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import openai
import pytest

from shared.infra.config import Settings
from shared.llm.base import DriftRequest, LLMError, SummaryRequest, TranscriptLine
from shared.llm.factory import make_llm
from shared.llm.openai_provider import OpenAIProvider
from shared.llm.prompts import drift_messages, summary_messages
from tests.llm_server import FakeOpenAI, Reply

# Small limits keep the failure tests fast: one retry, half a second an attempt.
TIMEOUT_S = 0.5
MAX_RETRIES = 1
REQUEST = SummaryRequest(
    lines=[
        TranscriptLine(id=1, role="user", content="Let's use Postgres for billing."),
        TranscriptLine(id=2, role="assistant", content="Agreed."),
    ],
    notes="Decided: Postgres.",
)
ANSWER = {"title": "Billing database", "summary": "Postgres.", "include_in_memory": True}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def provider(fake: FakeOpenAI) -> Iterator[OpenAIProvider]:
    with OpenAIProvider(
        api_key=None,
        base_url=fake.base_url,
        model="test-model",
        timeout_s=TIMEOUT_S,
        max_retries=MAX_RETRIES,
    ) as llm:
        yield llm


def test_r9_summary_answer_is_returned_raw_with_its_usage(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    content = json.dumps(ANSWER)
    fake.queue(Reply(content=content, usage=(120, 30), model="test-model-2026"))
    completion = provider.summarize(REQUEST)
    assert completion.text == content
    assert completion.model == "test-model-2026"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (120, 30)


def test_r10_request_carries_model_json_mode_and_the_summary_prompt(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.answer_json(ANSWER)
    provider.summarize(REQUEST)
    [body] = fake.requests
    # Nothing beyond what every OpenAI-compatible server accepts (vLLM, Ollama, LiteLLM).
    assert set(body) == {"model", "messages", "response_format", "temperature"}
    assert body["model"] == "test-model"
    assert body["response_format"] == {"type": "json_object"}
    assert body["temperature"] == 0
    assert body["messages"] == summary_messages(REQUEST)


def test_drift_request_carries_the_drift_prompt(fake: FakeOpenAI, provider: OpenAIProvider) -> None:
    request = DriftRequest(
        topic_title="Billing",
        topic_summary=None,
        earlier=[],
        window=[TranscriptLine(id=9, role="user", content="Unrelated: lunch?")],
    )
    answer = '{"drift": false, "first_message_id": null, "new_title": null}'
    fake.answer(answer)
    assert provider.detect_drift(request).text == answer
    assert fake.requests[0]["messages"] == drift_messages(request)


def test_r13_malformed_json_is_returned_raw_for_the_rules_to_judge(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.answer('{"title": "Half an answer", "include_in_memory": tr')
    assert provider.summarize(REQUEST).text == '{"title": "Half an answer", "include_in_memory": tr'


def test_missing_content_and_usage_become_empty_text_and_zeros(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.queue(Reply(content=None, omit_usage=True))
    completion = provider.summarize(REQUEST)
    assert completion.text == ""
    assert completion.model == "test-model"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (0, 0)


def test_r14_server_errors_raise_llm_error_after_the_clients_retries(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.fail(500, retry_after_ms=10)
    with pytest.raises(LLMError, match=r"HTTP 500") as raised:
        provider.summarize(REQUEST)
    assert "\n" not in str(raised.value)
    assert fake.calls == MAX_RETRIES + 1


def test_r14_a_rejected_request_is_not_retried(fake: FakeOpenAI, provider: OpenAIProvider) -> None:
    fake.fail(400)
    with pytest.raises(LLMError, match=r"HTTP 400"):
        provider.summarize(REQUEST)
    assert fake.calls == 1


def test_r14_a_retry_that_succeeds_is_a_normal_answer(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.queue(Reply(content=None, status=503, retry_after_ms=10), json.dumps(ANSWER))
    assert json.loads(provider.summarize(REQUEST).text) == ANSWER
    assert fake.calls == 2


def test_r14_an_answer_slower_than_the_timeout_raises_llm_error(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.slow(5.0, json.dumps(ANSWER))
    with pytest.raises(LLMError, match="timed out"):
        provider.summarize(REQUEST)
    assert fake.calls == MAX_RETRIES + 1


def test_r14_an_unreachable_server_raises_llm_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (
        OpenAIProvider(
            api_key="sk-test",
            base_url=f"http://127.0.0.1:{port}/v1",
            model="test-model",
            timeout_s=TIMEOUT_S,
            max_retries=0,
        ) as llm,
        pytest.raises(LLMError, match="connection failed"),
    ):
        llm.summarize(REQUEST)


def test_the_factory_builds_the_openai_provider_from_settings(fake: FakeOpenAI) -> None:
    settings = Settings(
        openai_api_key="sk-test",
        openai_base_url=fake.base_url,
        llm_model="served-model",
        llm_timeout_s=TIMEOUT_S,
        llm_max_retries=MAX_RETRIES,
    )
    llm = make_llm(settings)
    assert isinstance(llm, OpenAIProvider)
    with llm:
        fake.answer_json(ANSWER)
        assert llm.summarize(REQUEST).model == "served-model"
    assert (llm.model, llm.timeout_s, llm.max_retries) == ("served-model", 0.5, 1)


def test_fake_server_lists_models(fake: FakeOpenAI) -> None:
    with openai.OpenAI(api_key="unused", base_url=fake.base_url, max_retries=0) as client:
        assert [model.id for model in client.models.list()] == ["fake-model"]


def test_fake_server_can_be_reset_between_tests(fake: FakeOpenAI, provider: OpenAIProvider) -> None:
    fake.queue("first")
    provider.summarize(REQUEST)
    fake.requests.clear()
    fake.calls = 0
    assert (fake.requests, fake.calls) == ([], 0)
    provider.summarize(REQUEST)
    fake.reset()
    assert (fake.requests, fake.calls) == ([], 0)
    assert provider.summarize(REQUEST).text == "{}"
