"""Small helpers for API tests."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")


def new_session(
    client: FlaskClient, auth: dict[str, str], agent: str = "agent-1", user: str = "user-1"
) -> dict[str, Any]:
    response = client.post(
        "/agents-api/sessions", json={"agentId": agent, "userId": user}, headers=auth
    )
    assert response.status_code == 201, response.json
    body: dict[str, Any] = response.json  # type: ignore[assignment]
    return body


def committed_session(factory: sessionmaker[Session]) -> tuple[uuid.UUID, uuid.UUID]:
    """(org id, session id) of a new org's new session, committed through `factory`."""
    from shared.auth.service import org_for_key
    from shared.infra.db.uow import UnitOfWork
    from shared.infra.queue import RecordingQueue
    from shared.sessions.service import create_session
    from tests.conftest import new_key

    key = new_key(factory)
    with UnitOfWork(factory, RecordingQueue()) as uow:
        org_id = org_for_key(uow=uow, key=key)
        assert org_id is not None
        sid = create_session(uow=uow, org_id=org_id, agent_id="a", user_id="u").session.id
        uow.commit()
    return org_id, sid


def post_message(
    client: FlaskClient, auth: dict[str, str], session_id: str, content: str, role: str = "user"
) -> dict[str, Any]:
    response = client.post(
        f"/agents-api/sessions/{session_id}/messages",
        json={"role": role, "content": content},
        headers=auth,
    )
    assert response.status_code == 201, response.json
    body: dict[str, Any] = response.json  # type: ignore[assignment]
    return body


def wait_for(
    probe: Callable[[], T | None], *, timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> T:
    """Poll `probe` until it returns something truthy (work done by another process)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or probe}")
        time.sleep(interval)


# A Prometheus scrape: each sample's value by its name and its labels.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """Every sample that http://127.0.0.1:<port>/metrics exports, parsed as Prometheus does."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class RecordingSender:
    """What CeleryJobQueue needs of a Celery app, recording what it sends (no broker)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any], Any]] = []

    def send_task(self, name: str, *, kwargs: dict[str, Any], countdown: Any, headers: Any,
                  **options: Any) -> None:  # fmt: skip
        self.sent.append((name, kwargs, options.get("queue")))
