"""[4.4] A call to an OpenAI-compatible model or embeddings server: a span in OpenTelemetry's
GenAI conventions over httpx2's own span of the HTTP call, with no prompt or answer."""

from __future__ import annotations

import io
import json
import logging
import uuid
from contextlib import AbstractContextManager

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, SpanKind, StatusCode

from shared.embeddings.provider import OpenAIEmbedder
from shared.infra import tracing
from shared.infra.logs import configure_logging
from shared.llm.base import LLMError, SummaryRequest, TranscriptLine
from shared.llm.openai_provider import OpenAIProvider
from tests.llm_server import FakeOpenAI, Reply

PROMPT_WORDS = "Periwinkle cantaloupe"
ANSWER = {"title": "Brisket plans", "summary": "Smoked brisket", "include_in_memory": True}


def a_task() -> AbstractContextManager[Span]:
    """What a call is made for: a client span with nothing above it is not sampled
    (shared/infra/tracing.py: NoLoneCalls)."""
    return tracing.tracer.start_as_current_span("a task")


def _request(org: uuid.UUID) -> SummaryRequest:
    line = TranscriptLine(1, "user", f"{PROMPT_WORDS} for dinner")
    return SummaryRequest(lines=[line], org_id=org)


def _child(spans: list[ReadableSpan], parent: ReadableSpan) -> ReadableSpan:
    children = [s for s in spans if s.parent and s.parent.span_id == parent.context.span_id]
    assert len(children) == 1, [s.name for s in children]
    return children[0]


def test_44_a_chat_call_is_a_genai_span_over_its_http_call(
    exporter: InMemorySpanExporter, fake_openai: FakeOpenAI, openai_llm: OpenAIProvider
) -> None:
    exporter.clear()
    org = uuid.uuid4()
    fake_openai.queue(Reply(json.dumps(ANSWER), usage=(321, 12), model="test-model-2026-01"))
    with a_task():
        openai_llm.summarize(_request(org))

    spans = list(exporter.get_finished_spans())
    chat = next(s for s in spans if s.name == "chat test-model")
    attributes = chat.attributes or {}
    assert chat.kind == SpanKind.CLIENT
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "test-model"
    assert attributes["gen_ai.response.model"] == "test-model-2026-01"
    assert attributes["gen_ai.usage.input_tokens"] == 321
    assert attributes["gen_ai.usage.output_tokens"] == 12
    assert attributes["driftless.llm.purpose"] == "summarize"
    assert attributes["driftless.org_id"] == str(org)
    post = _child(spans, chat)
    assert post.kind == SpanKind.CLIENT and post.name == "POST"
    assert str((post.attributes or {}).get("url.full")).rstrip("/") in fake_openai.base_url
    for span in spans:
        text = span.to_json()
        assert PROMPT_WORDS not in text and "brisket" not in text.lower(), span.name


def test_44_a_failed_chat_call_is_an_error_span_named_by_its_class(
    exporter: InMemorySpanExporter, fake_openai: FakeOpenAI, openai_llm: OpenAIProvider
) -> None:
    exporter.clear()
    fake_openai.fail(500)
    with a_task(), pytest.raises(LLMError):
        openai_llm.summarize(_request(uuid.uuid4()))

    chat = next(s for s in exporter.get_finished_spans() if s.name == "chat test-model")
    assert chat.status.status_code == StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "LLMError"
    assert "gen_ai.usage.input_tokens" not in (chat.attributes or {})


def test_44_an_embeddings_call_is_a_genai_span_with_its_count_of_texts(
    exporter: InMemorySpanExporter, fake_openai: FakeOpenAI
) -> None:
    exporter.clear()
    org = uuid.uuid4()
    embedder = OpenAIEmbedder(
        api_key="test", base_url=fake_openai.base_url, model="test-embed", dimensions=None,
        timeout_s=5, max_retries=0,
    )  # fmt: skip
    try:
        with a_task():
            vectors = embedder.embed([f"{PROMPT_WORDS} one", "two"], org_id=org)
    finally:
        embedder.close()
    assert len(vectors) == 2

    spans = list(exporter.get_finished_spans())
    call = next(s for s in spans if s.name == "embeddings test-embed")
    attributes = call.attributes or {}
    assert attributes["gen_ai.operation.name"] == "embeddings"
    assert attributes["gen_ai.request.model"] == "test-embed"
    assert attributes["driftless.embeddings.texts"] == 2
    assert attributes["driftless.org_id"] == str(org)
    assert _child(spans, call).name == "POST"
    assert all(PROMPT_WORDS not in s.to_json() for s in spans)


def test_44_a_log_line_written_in_a_trace_names_it(exporter: InMemorySpanExporter) -> None:
    stream = io.StringIO()
    handler = configure_logging("json", stream=stream)
    try:
        with a_task() as span:
            logging.getLogger("driftless.test").warning("inside")
        logging.getLogger("driftless.test").warning("outside")
    finally:
        logging.getLogger().removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert "trace_id" not in outside
