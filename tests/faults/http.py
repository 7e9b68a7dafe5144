"""A tiny JSON client for the web subprocess: one connection per call, safe across threads."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

# A status for "no answer at all" (refused, reset, timed out): never a valid HTTP status.
NO_ANSWER = 0


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    error: str | None = None  # why there was no answer

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def is_unavailable(answer: Answer, dependency: str) -> bool:
    """The contract's 503 naming what is down: {"error": {"code": "unavailable", ...}}."""
    error = answer.body.get("error") if isinstance(answer.body, dict) else None
    return (
        answer.status == 503
        and isinstance(error, dict)
        and error.get("code") == "unavailable"
        and dependency.lower() in str(error.get("message")).lower()
    )


@dataclass(frozen=True)
class Api:
    port: int
    key: str
    timeout_s: float = 30.0

    def call(self, method: str, path: str, body: object | None = None) -> Answer:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
        headers = {"Authorization": f"Bearer {self.key}"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except OSError as exc:  # refused, reset or timed out: the client saw no answer
            return Answer(NO_ANSWER, None, f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Answer(response.status, parsed)

    def get(self, path: str) -> Answer:
        return self.call("GET", path)

    def post(self, path: str, body: object | None = None) -> Answer:
        return self.call("POST", path, body if body is not None else {})

    # --- the routes the fault tests drive -------------------------------------------------

    def new_session(self, agent: str = "agent", user: str = "user") -> dict[str, Any]:
        answer = self.post("/agents-api/sessions", {"agentId": agent, "userId": user})
        assert answer.status == 201, answer
        body: dict[str, Any] = answer.body
        return body

    def post_message(self, session_id: str, content: str, role: str = "user") -> Answer:
        return self.post(
            f"/agents-api/sessions/{session_id}/messages", {"role": role, "content": content}
        )

    def close_topic(self, session_id: str) -> Answer:
        """Open a new topic: the active one is closed and its summary enqueued (R25)."""
        return self.post(f"/agents-api/sessions/{session_id}/topics")

    def evaluate(self, session_id: str, trigger: str = "navigation") -> Answer:
        return self.post(f"/agents-api/sessions/{session_id}/evaluate", {"trigger": trigger})
