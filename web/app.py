"""The Flask app factory (gunicorn: `web.app:create_app()`)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from flask import jsonify
from flask_openapi3 import Info, OpenAPI
from sqlalchemy.orm import Session, sessionmaker

from shared.bootstrap import Runtime
from shared.infra import tracing
from shared.infra.config import Settings, load_settings_or_exit
from shared.infra.heap import freeze_startup_objects
from shared.infra.logs import configure_logging
from shared.infra.queue import JobQueue
from web.auth import install_auth
from web.body import install_body_checks
from web.errors import install_error_handlers, validation_error_response
from web.jobs import make_job_queue
from web.logcontext import install_log_context
from web.metrics import install_metrics
from web.paths import KeepEncodedSlashes, SegmentConverter
from web.security_headers import install_security_headers
from web.views import (
    agents,
    console,
    context,
    curation,
    erasure,
    export,
    health,
    importing,
    limits,
    live,
    memory,
    providers,
    reevaluations,
    search,
    sessions,
    tools,
    topics,
    triggers,
    usage,
    webhooks,
)

log = logging.getLogger(__name__)

BEARER_SCHEME: dict[str, Any] = {"bearer": {"type": "http", "scheme": "bearer"}}


def _cooperative_database() -> None:
    """Under gevent (the Procfile's `--worker-class web.server.FairGeventWorker`),
    psycopg2 waits for PostgreSQL by yielding to the other greenlets instead of blocking
    the process.

    gunicorn's worker monkey-patches the standard library before it loads the app, so
    this runs after the patching and before the engine's first connection.
    """
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("socket"):
        from psycogreen.gevent import patch_psycopg

        patch_psycopg()
        log.info("gevent: psycopg2 waits cooperatively")


def _statement_timeout(settings: Settings) -> tuple[None, float] | None:
    """The web's bound on every statement (no lock timeout of its own: a lock wait is
    part of the statement), or None when DRIFTLESS_WEB_STATEMENT_TIMEOUT_MS is 0."""
    if settings.web_statement_timeout_ms == 0:
        return None
    return None, settings.web_statement_timeout_ms / 1000


def create_app(
    settings: Settings | None = None,
    *,
    queue: JobQueue | None = None,
    session_factory: sessionmaker[Session] | None = None,
) -> OpenAPI:
    """Build the app from settings (default: the environment).

    `queue` and `session_factory` replace Celery and the engine's sessions (tests run
    each request inside a savepoint of their own connection).
    """
    serving = settings is None  # a real process (gunicorn "web.app:create_app()")
    if settings is None:
        settings = load_settings_or_exit()
        configure_logging(settings.log_format)
    _cooperative_database()
    # Before the runtime: its engine is made by the traced `create_engine`.
    tracing.start(tracing.SERVICE_WEB)
    app = OpenAPI(
        __name__,
        info=Info(title="driftless", version="0.1.0"),
        security_schemes=BEARER_SCHEME,
        doc_ui=False,
        validation_error_callback=validation_error_response,
    )
    # Before any route: an id holding `/` is one segment (web/paths.py).
    app.url_map.converters["default"] = app.url_map.converters["string"] = SegmentConverter
    app.wsgi_app = KeepEncodedSlashes(app.wsgi_app)  # type: ignore[method-assign]
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]

    app.extensions["driftless"] = Runtime(
        settings,
        make_queue=make_job_queue,
        queue=queue,
        session_factory=session_factory,
        # The whole budget as the pool, none as overflow: the pool closes an overflow
        # connection whenever it comes back to a full pool, and under a steady load of
        # more requests than pool connections that was several new PostgreSQL backends a
        # second, each planning the post's statements again. Same ceiling, kept open.
        pool_size=settings.db_pool_size + settings.db_max_overflow,
        max_overflow=0,
        # No request holds a pooled connection longer than this (503 `timeout`); only
        # the web: workers and migrations legitimately run long statements.
        transaction_bounds=_statement_timeout(settings),
        # The backstop should a request hold a transaction while it waits on its client
        # (imports and exports do not: shared/portability/): PostgreSQL ends it.
        idle_in_transaction_s=settings.web_idle_in_transaction_ms / 1000 or None,
    ).build()

    tracing.trace_app(app)  # a no-op unless traced
    install_metrics(app)  # first: it times everything, rejected requests included
    install_log_context(app)  # before auth: a refused request's log lines carry its id too
    install_auth(app)
    install_body_checks(app)
    install_error_handlers(app)
    install_security_headers(app)
    blueprints = (
        health.bp,
        agents.bp,
        sessions.bp,
        topics.bp,
        curation.bp,
        tools.bp,
        memory.bp,
        context.bp,
        triggers.bp,
        live.bp,
        erasure.bp,
        usage.bp,
        providers.bp,
        limits.bp,
        reevaluations.bp,
        webhooks.bp,
        search.bp,
        importing.bp,
        export.bp,
    )
    for blueprint in blueprints:
        app.register_api(blueprint)
    app.register_blueprint(console.bp)
    # Served by hand: flask-openapi3 mounts its JSON only together with its doc UIs.
    app.add_url_rule("/agents-api/openapi.json", "openapi", lambda: jsonify(app.api_doc))
    if serving:
        log.info("startup objects frozen for the collector: %d", freeze_startup_objects())
    return app
