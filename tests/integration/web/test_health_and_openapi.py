from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import RecordingQueue
from tests.helpers import new_session


def test_readyz_reports_database_and_redis(client: FlaskClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    # Recall by meaning is a detail, off by default, and never makes the answer a 503.
    checks = {"database": "ok", "redis": "ok", "embeddings": "off: DRIFTLESS_EMBEDDINGS=none"}
    assert response.json == {"status": "ok", "checks": checks}


def test_readyz_is_503_when_redis_is_down(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    from web.app import create_app

    down = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    app = create_app(down, queue=RecordingQueue(), session_factory=session_factory)
    response = app.test_client().get("/readyz")
    assert response.status_code == 503
    body: Any = response.json
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("unavailable")
    assert app.test_client().get("/healthz").status_code == 200  # liveness does not care


def test_openapi_documents_every_route(app: Any, client: FlaskClient) -> None:
    document: Any = client.get("/agents-api/openapi.json").json
    assert document["openapi"].startswith("3.")
    documented = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
    }
    served = {
        (method, rule.rule.replace("<", "{").replace(">", "}"))
        for rule in app.url_map.iter_rules()
        for method in rule.methods - {"HEAD", "OPTIONS"}
        if rule.endpoint not in {"static", "openapi", "metrics"}
        and not rule.endpoint.startswith("console.")
    }
    assert served and served <= documented
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_metrics_are_prometheus_text_and_count_requests(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    client.get("/healthz")
    client.get("/agents-api/sessions/not-a-uuid", headers=auth)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    body = response.data.decode()
    assert 'driftless_http_requests_total{route="/healthz",status="200"}' in body
    assert 'route="/agents-api/sessions/<sid>",status="422"' in body


def test_metrics_show_the_domain_events_the_web_counted(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth)
    client.put(
        f"/agents-api/topics/{session['activeTopicId']}/memory",
        json={"state": "promoted"},
        headers=auth,
    )
    client.post(
        f"/agents-api/sessions/{session['id']}/evaluate", json={"trigger": "manual"}, headers=auth
    )
    body = client.get("/metrics").data.decode()
    assert 'driftless_memory_changes_total{actor="user",change="promoted"}' in body
    assert 'driftless_debounce_triggers_total{outcome="scheduled",trigger="manual"}' in body
    assert "# TYPE driftless_jobs_enqueued_total counter" in body
