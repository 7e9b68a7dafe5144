"""A process whose connection pool is used up answers 503, not 500, and recovers."""

from __future__ import annotations

from typing import Any

from shared.config import Settings
from shared.db.engine import make_engine, make_session_factory
from shared.queue import RecordingQueue


def test_an_exhausted_pool_answers_503_naming_overload_then_recovers(
    settings: Settings, database_url: str
) -> None:
    from web.app import create_app

    engine = make_engine(database_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    app = create_app(settings, queue=RecordingQueue(), session_factory=make_session_factory(engine))
    client = app.test_client()
    headers = {"Authorization": "Bearer dl_not-a-real-key"}
    try:
        with engine.connect():  # the pool's only connection, held by "another request"
            busy = client.get("/agents-api/scopes", headers=headers)
        body: Any = busy.json
        assert busy.status_code == 503
        assert body["error"]["code"] == "unavailable" and "overloaded" in body["error"]["message"]
        # The connection is back: the same process answers normally (401: the key is fake).
        assert client.get("/agents-api/scopes", headers=headers).status_code == 401
    finally:
        engine.dispose()
