"""Traces, offline: the SDK's in-memory exporter in this process, where the web app and a
real Celery worker (a thread, on the real broker) both run, so that every span of a turn,
the request's and the worker's, lands in one list.

OpenTelemetry's provider is the process's: this package starts tracing before it builds its
app, worker and engines (the instrumentation traces engines made after it), and stops it
(the instrumentations removed, the provider forgotten) when the package ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from celery import Celery
from flask.testing import FlaskClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once
from sqlalchemy.orm import Session, sessionmaker

from shared.infra import tracing
from shared.infra.config import Settings
from tests.conftest import new_key
from tests.worker_thread import worker_thread


@pytest.fixture(scope="package")
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert tracing.start("driftless-test", exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.stop()
        _forget_the_provider()


def _forget_the_provider() -> None:
    """The API lets a process set its provider once; the tests after this package run as
    an untraced process does, so the global goes back to the API's proxy, as
    opentelemetry-test-utils' reset_trace_globals does."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    # The module's proxy resolved to the stopped provider's tracer: a new, unresolved one.
    tracing.tracer = trace.get_tracer("driftless")


@dataclass(frozen=True)
class Traced:
    """The web app and a worker, both traced into `exporter`."""

    client: FlaskClient
    factory: sessionmaker[Session]
    exporter: InMemorySpanExporter
    celery: Celery

    def new_org(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {new_key(self.factory)}"}

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture(scope="package")
def traced(settings: Settings, exporter: InMemorySpanExporter) -> Iterator[Traced]:
    import worker.tasks  # noqa: F401  (registers the shared tasks before the app finalizes)
    from web.app import create_app
    from worker.app import make_celery
    from worker.context import context_of

    # Webhook receivers listen on 127.0.0.1.
    local = settings.model_copy(update={"webhook_allow_private": True, "webhook_backoff_s": 0.1})
    celery_app = make_celery(local)
    app = create_app(local)  # jobs through the broker and the orgs' lists, as served
    runtime: Any = app.extensions["driftless"]
    try:
        with worker_thread(celery_app):
            yield Traced(app.test_client(), runtime.session_factory, exporter, celery_app)
    finally:
        context_of(celery_app).close()
        runtime.close()
