"""The span of a call to a model, in OpenTelemetry's GenAI conventions.

One span per call (each attempt the rate limiter makes is a call), named as the
conventions say (`chat <model>`, `embeddings <model>`), with the model asked and
answered, the tokens counted, and the outcome. Never the prompt or the answer: the
conventions' content attributes stay off. The HTTP call under it, if any, is httpx's own
span (shared/infra/tracing.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace

from shared.infra import tracing
from shared.llm.base import Usage

# Who answers, as the conventions name providers: an OpenAI-compatible server is `openai`.
OPENAI = "openai"
LOCAL = "driftless.local"


@contextmanager
def model_call(
    operation: str,
    *,
    provider: str,
    model: str,
    org_id: uuid.UUID | None,
    purpose: str | None = None,
    own_model: bool = False,
) -> Iterator[trace.Span]:
    """The span of one call: `operation` is `chat` or `embeddings`. An exception ends it
    as an error, by its class (`error.type`)."""
    attributes: dict[str, str | bool] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,  # the name before the conventions' 1.37; backends read both
        "gen_ai.request.model": model,
        "driftless.llm.own_model": own_model,
    }
    if purpose is not None:
        attributes["driftless.llm.purpose"] = purpose
    if org_id is not None:
        attributes[tracing.ORG_ID] = str(org_id)
    with tracing.tracer.start_as_current_span(
        f"{operation} {model}", kind=trace.SpanKind.CLIENT, attributes=attributes,
        record_exception=False, set_status_on_exception=False,
    ) as span:  # fmt: skip
        try:
            yield span
        except BaseException as exc:
            tracing.failed(span, exc)
            raise


def answered(span: trace.Span, *, usage: Usage, model: str | None = None) -> None:
    """The call's answer: what it cost, and which model answered (a dated variant)."""
    if not span.is_recording():
        return
    span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
    if model:
        span.set_attribute("gen_ai.response.model", model)
