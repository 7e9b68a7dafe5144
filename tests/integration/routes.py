"""Every authenticated route of the API, for the auth and isolation matrices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # with {sid}, {tid}, {agent} placeholders
    body: dict[str, Any] | None = field(default=None)

    def url(self, **ids: str) -> str:
        return self.path.format(**ids)


ROUTES = [
    Route("PUT", "/agents-api/agents/{agent}", {"soul": "s"}),
    Route("GET", "/agents-api/agents/{agent}"),
    Route("POST", "/agents-api/sessions", {"agentId": "a", "userId": "u"}),
    Route("GET", "/agents-api/sessions/{sid}"),
    Route("POST", "/agents-api/sessions/{sid}/messages", {"role": "user", "content": "x"}),
    Route("GET", "/agents-api/sessions/{sid}/messages"),
    Route("POST", "/agents-api/sessions/{sid}/topics", {}),
    Route("GET", "/agents-api/topics/{tid}"),
]

# Routes that name a resource of an org: another org's key must see 404 there.
SCOPED = [r for r in ROUTES if "{" in r.path and r.method != "PUT"]
