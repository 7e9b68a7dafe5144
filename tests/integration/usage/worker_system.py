"""A real Celery worker (in a thread, on the real broker, queues of its own) behind the
web app, both on the committed database, calling our OpenAI-compatible server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import CeleryJobQueue
from tests.conftest import new_key
from tests.helpers import new_session, post_message, wait_for
from tests.integration.usage.ledger import Row, rows_of
from tests.llm_server import FakeOpenAI
from tests.worker_thread import worker_thread


@dataclass(frozen=True)
class System:
    client: FlaskClient  # the web app, sending jobs to the worker below
    factory: sessionmaker[Session]  # committed sessions on the same database

    def new_org(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {new_key(self.factory)}"}

    def close_a_topic(self, auth: dict[str, str]) -> tuple[str, str]:
        """(org id, topic id) of a six-message topic just closed: its summary is queued."""
        session = new_session(self.client, auth)
        for i in range(6):
            role = "user" if i % 2 == 0 else "assistant"
            post_message(self.client, auth, session["id"], f"We decided on step {i}.", role)
        response = self.client.post(f"/agents-api/sessions/{session['id']}/topics", headers=auth)
        assert response.status_code == 201, response.json
        return session["orgId"], session["activeTopicId"]

    def summarized(self, auth: dict[str, str], topic_id: str) -> Any:
        def probe() -> Any:
            topic: Any = self.client.get(f"/agents-api/topics/{topic_id}", headers=auth).json
            return topic if topic["summarizedAt"] else None

        return wait_for(probe, timeout=60, what="the worker to summarize the closed topic")

    def rows(self, org_id: str) -> list[Row]:
        return rows_of(self.factory, uuid.UUID(org_id))


@contextmanager
def running_system(
    settings: Settings, fake_openai_server: FakeOpenAI, model: str
) -> Iterator[System]:
    import worker.tasks  # noqa: F401  (registers the shared tasks before the app finalizes)
    from web.app import create_app
    from worker.app import make_celery
    from worker.context import context_of

    # One attempt per call, so one failed call is one row.
    llm_settings = settings.model_copy(
        update={
            "llm": "openai",
            "openai_api_key": "test",
            "openai_base_url": fake_openai_server.base_url,
            "llm_model": model,
            "llm_max_retries": 0,
            "llm_timeout_s": 10.0,
        }
    )
    celery_app = make_celery(llm_settings)
    # Queues of its own on the shared broker: no other test's worker takes these jobs.
    celery_app.conf.broker_transport_options = {
        **celery_app.conf.broker_transport_options,
        "global_keyprefix": f"usage-{uuid.uuid4().hex[:8]}:",
    }
    app = create_app(llm_settings, queue=CeleryJobQueue(celery_app))
    runtime = app.extensions["driftless"]
    try:
        with worker_thread(celery_app):
            yield System(app.test_client(), runtime.session_factory)
    finally:
        context_of(celery_app).engine.dispose()
        runtime.engine.dispose()
