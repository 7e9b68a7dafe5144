"""[4.4] Traces are configured by the OpenTelemetry SDK's own variables, off by default;
each process has its own service name unless told otherwise; a job carries its context."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Decision
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from shared.infra import tracing
from shared.infra.fair import FairJob

OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
)  # fmt: skip


@pytest.fixture(autouse=True)
def no_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("variables", "wanted"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, None),  # compose passes an unset one as ""
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, None),  # no endpoint: nothing to send to
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
        ({"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
    ],
)
def test_44_traces_are_on_only_when_the_sdks_variables_name_an_exporter(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], wanted: str | None
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert tracing.wanted() == wanted


def test_44_off_by_default_start_installs_nothing_and_a_job_carries_no_context() -> None:
    assert tracing.start(tracing.SERVICE_WEB) is False
    assert not tracing.active()
    with tracing.tracer.start_as_current_span("a request"):
        assert tracing.carrier() == {}


@pytest.mark.parametrize(
    "service", [tracing.SERVICE_WEB, tracing.SERVICE_WORKER, tracing.SERVICE_BEAT]
)
def test_44_each_process_is_named_unless_otel_service_name_says_otherwise(
    monkeypatch: pytest.MonkeyPatch, service: str
) -> None:
    assert tracing.resource(service).attributes[SERVICE_NAME] == service
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,team=memory")
    named = tracing.resource(service).attributes
    assert named[SERVICE_NAME] == "from-attributes" and named["team"] == "memory"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-memory")
    assert tracing.resource(service).attributes[SERVICE_NAME] == "my-memory"


def _parent(sampled: bool) -> Context:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    span = NonRecordingSpan(SpanContext(1, 2, is_remote=True, trace_flags=flags))
    return trace.set_span_in_context(span)


def test_44_a_client_call_with_nothing_above_it_is_not_a_trace() -> None:
    sampler = tracing.NoLoneCalls(ALWAYS_ON)
    lone = sampler.should_sample(None, 7, "BRPOP", SpanKind.CLIENT)
    assert lone.decision == Decision.DROP
    # A call made for a request or a task, a request and a task themselves: sampled.
    assert sampler.should_sample(_parent(True), 7, "BRPOP", SpanKind.CLIENT).decision == (
        Decision.RECORD_AND_SAMPLE
    )
    assert sampler.should_sample(None, 7, "POST /x", SpanKind.SERVER).decision == (
        Decision.RECORD_AND_SAMPLE
    )
    # Otherwise the configured sampler decides.
    off = tracing.NoLoneCalls(ALWAYS_OFF)
    assert off.should_sample(None, 7, "POST /x", SpanKind.SERVER).decision == Decision.DROP


def test_44_a_fair_job_carries_its_trace_and_one_pushed_before_carries_none() -> None:
    headers = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    job = FairJob("driftless.summarize_topic", {"topic_id": "t"}, "org", trace=headers)
    assert FairJob.decode(job.encode()).trace == headers
    older = json.loads(job.encode())
    del older["trace"]
    assert FairJob.decode(json.dumps(older)).trace == {}
