"""A running system for webhook tests: the web app sending jobs to a real Celery worker
(in a thread, on the real broker, on queues of its own), and an org's view of it."""

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
from tests.helpers import wait_for
from tests.webhook_receiver import Receiver
from tests.worker_thread import worker_thread

SCOPE = "agentId=agent-1&userId=user-1"


@dataclass(frozen=True)
class System:
    client: FlaskClient  # the web app, sending jobs to the worker below
    factory: sessionmaker[Session]

    def new_org(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {new_key(self.factory)}"}

    def subscribe(self, auth: dict[str, str], receiver: Receiver, path: str = "/hook") -> str:
        answer: Any = self.client.post(
            "/agents-api/webhooks",
            headers=auth,
            json={"url": receiver.url + path, "events": ["facts.changed"]},
        )
        assert answer.status_code == 201, answer.json
        receiver.secret = answer.json["secret"]
        return str(answer.json["id"])

    def change_facts(self, auth: dict[str, str], **facts: str) -> None:
        answer = self.client.put(f"/agents-api/facts?{SCOPE}", headers=auth, json=facts)
        assert answer.status_code == 200, answer.json

    def deliveries(self, auth: dict[str, str], webhook_id: str) -> list[dict[str, Any]]:
        answer: Any = self.client.get(f"/agents-api/webhooks/{webhook_id}/deliveries", headers=auth)
        assert answer.status_code == 200, answer.json
        return list(answer.json["deliveries"])

    def settled(self, auth: dict[str, str], webhook_id: str, count: int) -> list[dict[str, Any]]:
        """The subscription's `count` deliveries, once none is still owed."""

        def probe() -> list[dict[str, Any]] | None:
            deliveries = self.deliveries(auth, webhook_id)
            owed = [d for d in deliveries if d["status"] in ("pending", "failed")]
            return deliveries if len(deliveries) == count and not owed else None

        return wait_for(probe, timeout=60, what=f"{count} deliveries to settle")


@contextmanager
def running_system(settings: Settings, *, concurrency: int, **overrides: Any) -> Iterator[System]:
    """The web app and a worker of `concurrency` threads, on `settings` and `overrides`
    (private targets allowed: receivers are on 127.0.0.1)."""
    import worker.tasks  # noqa: F401  (registers the shared tasks before the app finalizes)
    from web.app import create_app
    from worker.app import make_celery
    from worker.context import context_of

    local = settings.model_copy(
        update={"webhook_allow_private": True, "webhook_backoff_s": 0.1, **overrides}
    )
    celery_app = make_celery(local)
    # Queues of its own on the shared broker: no other test's worker takes these jobs.
    celery_app.conf.broker_transport_options = {
        **celery_app.conf.broker_transport_options,
        "global_keyprefix": f"webhooks-{uuid.uuid4().hex[:8]}:",
    }
    app = create_app(local, queue=CeleryJobQueue(celery_app))
    runtime = app.extensions["driftless"]
    try:
        with worker_thread(celery_app, concurrency=concurrency):
            yield System(app.test_client(), runtime.session_factory)
    finally:
        context_of(celery_app).close()
        runtime.engine.dispose()
