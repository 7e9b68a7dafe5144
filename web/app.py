"""The Flask app factory (gunicorn: `web.app:create_app()`)."""

from __future__ import annotations

import logging
from typing import Any

import redis
from flask import jsonify
from flask_openapi3 import Info, OpenAPI
from sqlalchemy.orm import Session, sessionmaker

from shared.config import Settings, load_settings_or_exit
from shared.db.engine import make_engine, make_session_factory
from shared.limits import Limits
from shared.queue import JobQueue
from shared.runtime import resolve_endpoints
from shared.triggers.debounce import Debouncer
from web.auth import install_auth
from web.body import install_body_checks
from web.errors import install_error_handlers, validation_error_response
from web.logcontext import install_log_context
from web.metrics import install_metrics
from web.runtime import WebRuntime
from web.security_headers import install_security_headers
from web.views import (
    agents,
    console,
    context,
    curation,
    erasure,
    health,
    live,
    memory,
    sessions,
    tools,
    topics,
    triggers,
)
from worker.app import make_celery
from worker.logs import configure_logging
from worker.queue import CeleryJobQueue

log = logging.getLogger(__name__)

BEARER_SCHEME: dict[str, Any] = {"bearer": {"type": "http", "scheme": "bearer"}}


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
    if settings is None:  # a real process (gunicorn "web.app:create_app()"): its logging
        settings = load_settings_or_exit()
        configure_logging(settings.log_format)
    endpoints = resolve_endpoints(settings)
    app = OpenAPI(
        __name__,
        info=Info(title="driftless", version="0.1.0"),
        security_schemes=BEARER_SCHEME,
        doc_ui=False,
        validation_error_callback=validation_error_response,
    )
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]

    engine = make_engine(
        endpoints.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
    )
    if queue is None:
        queue = CeleryJobQueue(make_celery(settings, endpoints=endpoints))
    # Short timeouts: a Redis outage must degrade requests (R29), not hang them.
    client = redis.Redis.from_url(endpoints.redis_url, socket_connect_timeout=1, socket_timeout=2)
    app.extensions["driftless"] = WebRuntime(
        settings=settings,
        engine=engine,
        session_factory=session_factory or make_session_factory(engine),
        queue=queue,
        redis=client,
        redis_url=endpoints.redis_url,
        debouncer=Debouncer.from_settings(client, settings),
        limits=Limits(max_json_depth=settings.max_json_depth),
    )

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
    )
    for blueprint in blueprints:
        app.register_api(blueprint)
    app.register_blueprint(console.bp)
    # Served by hand: flask-openapi3 mounts its JSON only together with its doc UIs.
    app.add_url_rule("/agents-api/openapi.json", "openapi", lambda: jsonify(app.api_doc))
    return app
