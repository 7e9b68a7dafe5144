"""Traces (OpenTelemetry): one trace per turn, from the request through the org's list and
the worker to the model call. Off unless the SDK's own variables say where to send them.

Configured only by the OpenTelemetry SDK's variables (docs/operations.md, "Traces"):
- OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT turns it on (OTLP);
  OTEL_TRACES_EXPORTER=console prints spans instead, `none` turns it off, as does
  OTEL_SDK_DISABLED=true;
- OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default) or grpc, and the exporters'
  other OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates), read by them;
- OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the SDK reads them: parentbased_always_on
  unless told), OTEL_BSP_* (the batch processor's queue and delay);
- OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; each process has a name of its own
  (driftless-web, driftless-worker, driftless-beat) unless they give one.

With tracing off no provider is installed and nothing is instrumented: the spans of our own
(enqueue, model job, model and embeddings calls) are the API's no-ops, and a job carries no
context. What spans may hold: ids, counts, model names, outcomes, lanes; never a message's
text, a summary, a prompt, a fact, a key or a token (tests/tracing/).

The provider and the instrumentations are the process's own, as OpenTelemetry's design has
it: `start` once, in the process that serves (the web app's factory, a worker's or beat's
init signal).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

log = logging.getLogger(__name__)

SERVICE_WEB = "driftless-web"
SERVICE_WORKER = "driftless-worker"
SERVICE_BEAT = "driftless-beat"

# Attribute names of our own spans (docs/contract.md, "Traces"): ids, never content.
ORG_ID = "driftless.org_id"

# Requests nobody needs a trace of: probes and scrapes, every few seconds from every pod
# (a regular expression searched in the request's URL).
EXCLUDED_URLS = r"^[a-z]+://[^/]+/(healthz|readyz|metrics)(\?|$)"

# How long a leaving process waits for its last spans to go (the exporters' own timeout).
FLUSH_TIMEOUT_MS = 10_000

tracer = trace.get_tracer("driftless")


@dataclass
class _Tracing:
    provider: TracerProvider
    instrumentors: list[Any]


_active: _Tracing | None = None


def wanted() -> str | None:
    """The exporter the SDK's variables ask for (`otlp`, `console`), or None: off."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "console":
        return "console"
    if exporter not in ("", "otlp"):
        if exporter != "none":
            log.warning("OTEL_TRACES_EXPORTER=%s is not one of otlp, console, none: "
                        "traces are off", exporter)  # fmt: skip
        return None
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return "otlp" if endpoint else None


def resource(service: str) -> Resource:
    """The process's name unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES'
    service.name) gives one: the SDK's detector reads both, and wins the merge."""
    return Resource.create({SERVICE_NAME: service}).merge(OTELResourceDetector().detect())


def _otlp_exporter() -> SpanExporter:
    """The exporter of the protocol asked for; it reads its endpoint, headers, timeout and
    certificates from the environment itself."""
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "grpc":
        _make_grpc_green()
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol != "http/protobuf":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported: http/protobuf it is",
                    protocol)  # fmt: skip
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HTTPSpanExporter,
    )

    return HTTPSpanExporter()


def _make_grpc_green() -> None:
    """gRPC's C core blocks the whole process while it waits, unless told of gevent:
    under the web's and the worker's gevent, the exporter would stall every greenlet."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("socket"):
        from grpc.experimental import gevent as grpc_gevent

        grpc_gevent.init_gevent()


def start(service: str, *, exporter: SpanExporter | None = None) -> bool:
    """Trace this process as `service`, if the environment asks for it (or an `exporter`
    is given: tests pass the SDK's in-memory one, whose spans are then exported as each
    ends). Idempotent: a process is traced once, by the first caller. True if on."""
    global _active
    if _active is not None:
        return True
    if exporter is None:
        kind = wanted()
        if kind is None:
            return False
        exporter = ConsoleSpanExporter() if kind == "console" else _otlp_exporter()
        processor: Any = BatchSpanProcessor(exporter)
    else:
        processor = SimpleSpanProcessor(exporter)
    provider = TracerProvider(resource=resource(service), sampler=NoLoneCalls(_env_sampler()))
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _active = _Tracing(provider, _instrument(provider))
    log.info("traces on: %s as %s", type(exporter).__name__,
             provider.resource.attributes.get(SERVICE_NAME))  # fmt: skip
    return True


def _env_sampler() -> Sampler:
    """The sampler OTEL_TRACES_SAMPLER (and _ARG) name: the SDK reads them when it makes a
    provider (parentbased_always_on unless told)."""
    return TracerProvider(shutdown_on_exit=False).sampler


class NoLoneCalls(Sampler):
    """The configured sampler, except that a client call with nothing above it is not a
    trace: a worker's broker polls, a heartbeat's Redis pipeline, a pool's ping, every
    second from every process, would otherwise be most of the traces. A call made for a
    request or a task is sampled with it."""

    def __init__(self, sampler: Sampler) -> None:
        self._sampler = sampler

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: trace.SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[trace.Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if kind == trace.SpanKind.CLIENT and not parent.is_valid:
            return SamplingResult(Decision.DROP)
        return self._sampler.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"NoLoneCalls{{{self._sampler.get_description()}}}"


def _instrument(provider: TracerProvider) -> list[Any]:
    """The project's own instrumentations: a task's publish and run (its context in the
    message's headers), every SQL statement (engines made after this:
    shared/infra/db/engine.py), every Redis command (its arguments as `?`), every HTTP
    call of httpx and httpx2 (a webhook delivery, a model's; with `traceparent`)."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.httpx import (
        HTTPX2ClientInstrumentor,
        HTTPXClientInstrumentor,
    )
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    instrumentors: list[Any] = []
    for instrumentor, options in (
        (CeleryInstrumentor(), {}),  # type: ignore[no-untyped-call, unused-ignore]
        # Its declared range ends below SQLAlchemy 2.1; the engine events it listens to
        # are unchanged there (tests/tracing/ sees the statements' spans).
        (SQLAlchemyInstrumentor(), {"skip_dep_check": True, "enable_commenter": False}),
        (RedisInstrumentor(), {}),
        (HTTPXClientInstrumentor(), {"request_hook": _origin_only}),  # webhooks
        (HTTPX2ClientInstrumentor(), {"request_hook": _origin_only}),  # openai's client
    ):
        instrumentor.instrument(tracer_provider=provider, **options)
        instrumentors.append(instrumentor)
    return instrumentors


def trace_app(app: Any) -> None:
    """The Flask app's requests as server spans, named by route; a no-op unless traced.
    The query string is left out (a search's words are in it)."""
    if _active is None:
        return
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    FlaskInstrumentor.instrument_app(  # type: ignore[no-untyped-call, unused-ignore]
        app,
        tracer_provider=_active.provider,
        excluded_urls=os.environ.get("OTEL_PYTHON_FLASK_EXCLUDED_URLS", EXCLUDED_URLS),
        response_hook=_without_query,
        enable_commenter=False,
    )


def _without_query(span: trace.Span, _status: str, _headers: Any) -> None:
    """The request's target without its query (a search's words are in it). A response
    hook: the instrumentation sets the request's attributes after its request hook."""
    attributes = getattr(span, "attributes", None) or {}
    if not span.is_recording():
        return
    target = attributes.get("http.target")
    if isinstance(target, str):
        span.set_attribute("http.target", target.partition("?")[0])
    if "url.query" in attributes:  # the stable conventions' name, when opted in
        span.set_attribute("url.query", "")


def _origin_only(span: trace.Span, request: Any) -> None:
    url = request.url
    if not span.is_recording():
        return
    if isinstance(url, tuple):  # (scheme, host, port, path), as bytes
        scheme, host, port = url[0].decode(), url[1].decode(), url[2]
    else:
        scheme, host, port = url.scheme, url.host, url.port
    origin = f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"
    for name in ("http.url", "url.full"):
        span.set_attribute(name, origin)


def stop() -> None:
    """Undo `start`: flush and drop the instrumentations (tests; a process just exits)."""
    global _active
    if _active is None:
        return
    for instrumentor in _active.instrumentors:
        instrumentor.uninstrument()
    _active.provider.force_flush()
    _active.provider.shutdown()
    _active = None


def flush() -> None:
    """Send the spans the batch processor still holds (OTEL_BSP_SCHEDULE_DELAY's worth, 5 s
    by default), within the exporter's time: for a process that leaves without running
    atexit, where the provider would do it (a prefork pool's child ends in os._exit)."""
    if _active is not None:
        _active.provider.force_flush(timeout_millis=FLUSH_TIMEOUT_MS)


def active() -> bool:
    return _active is not None


def carrier() -> dict[str, str]:
    """The current span's context as W3C headers (traceparent, tracestate): what a job
    carries through the org's list, where no message header goes. Empty when not traced."""
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


@contextmanager
def continued(
    headers: Mapping[str, str] | None,
    name: str,
    *,
    expected: tuple[type[BaseException], ...] = (),
    **attributes: Any,
) -> Iterator[trace.Span]:
    """A span that continues the trace of `headers` (a job's carrier) as its child, linked
    to the span current here (the ticket's task that popped it): one trace per turn, and
    the ticket's own trace a click away. An `expected` exception ends it as an outcome
    (`driftless.job.outcome`, its class's name), not as an error."""
    here = trace.get_current_span().get_span_context()
    links = [trace.Link(here)] if here.is_valid else []
    parent = propagate.extract(dict(headers)) if headers else otel_context.get_current()
    with tracer.start_as_current_span(
        name, context=parent, links=links, attributes=attributes,
        record_exception=False, set_status_on_exception=False,
    ) as span:  # fmt: skip
        try:
            yield span
        except expected as exc:
            span.set_attribute("driftless.job.outcome", type(exc).__name__)
            raise
        except BaseException as exc:
            failed(span, exc)
            raise


@contextmanager
def resumed(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Work done for a job outside its span (sent back to the broker after its span ended)
    stays in the job's trace: the carried context is current for the block."""
    if not headers:
        yield
        return
    token = otel_context.attach(propagate.extract(dict(headers)))
    try:
        yield
    finally:
        otel_context.detach(token)


def failed(span: trace.Span, exc: BaseException) -> None:
    """The span ended in `exc`: its class, not its message, which may quote what a model
    answered."""
    span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
    span.set_attribute("error.type", type(exc).__name__)


def set_org(org_id: object) -> None:
    """Name the org on the current span, so that one tenant's traces can be filtered."""
    span = trace.get_current_span()
    if span.is_recording() and org_id is not None:
        span.set_attribute(ORG_ID, str(org_id))
