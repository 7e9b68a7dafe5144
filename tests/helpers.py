"""Small helpers for API tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from flask.testing import FlaskClient

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
