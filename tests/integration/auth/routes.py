"""Every authenticated route of the API, for the auth and isolation matrices.

The list is explicit on purpose: each route says how to call it (its body, its query).
`unlisted_routes` compares it with the app's url_map, and test_auth.py fails while a
route the app serves is missing here, or a route listed here is no longer served.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PREFIX = "/agents-api"  # what web.auth guards: every path that starts so...
PUBLIC = {"/agents-api/openapi.json"}  # ...but these, which answer without a key

# The routes named by agent, user or fact key live in the caller's own namespace.
SCOPE = "agentId={agent_id}&userId={user_id}"


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # the url_map's rule, with {sid}, {tid}, {agent_id}, {user_id}, {key}, {name}
    body: dict[str, Any] | None = field(default=None)
    query: str = ""  # with the same placeholders
    values: dict[str, str] = field(default_factory=dict)  # placeholders that name no data

    def url(self, **ids: str) -> str:
        ids = {**ids, **self.values}
        url = self.path.format(**ids)
        return f"{url}?{self.query.format(**ids)}" if self.query else url


ROUTES = [
    # agents
    Route("PUT", "/agents-api/agents/{agent_id}", {"soul": "s"}),
    Route("GET", "/agents-api/agents/{agent_id}"),
    Route("DELETE", "/agents-api/agents/{agent_id}/users/{user_id}"),
    # a scope's facts and memory
    Route("GET", "/agents-api/facts", query=SCOPE),
    Route("PUT", "/agents-api/facts", {"k": "v"}, query=SCOPE),
    Route("DELETE", "/agents-api/facts/{key}", query=SCOPE),
    Route("GET", "/agents-api/facts/history", query=SCOPE + "&key={key}"),
    Route("GET", "/agents-api/memory", query=SCOPE),
    Route("GET", "/agents-api/search", query=SCOPE + "&q=anything"),
    Route("POST", "/agents-api/search", body={"agentId": "a", "userId": "u", "q": "anything"}),
    Route("GET", "/agents-api/scopes"),
    Route("GET", "/agents-api/export", query=SCOPE),
    # sessions
    Route("POST", "/agents-api/sessions", {"agentId": "a", "userId": "u"}),
    Route("GET", "/agents-api/sessions", query=SCOPE),
    Route("GET", "/agents-api/sessions/{sid}"),
    Route("GET", "/agents-api/sessions/{sid}/context"),
    Route("POST", "/agents-api/sessions/{sid}/evaluate", {"trigger": "manual"}),
    Route("GET", "/agents-api/sessions/{sid}/events"),
    Route("POST", "/agents-api/sessions/{sid}/messages", {"role": "user", "content": "x"}),
    Route("GET", "/agents-api/sessions/{sid}/messages"),
    Route(
        "POST",
        "/agents-api/sessions/{sid}/tools/{name}",
        {"arguments": {"op": "read"}},
        values={"name": "notes"},
    ),
    Route("POST", "/agents-api/sessions/{sid}/topics", {}),
    Route("PUT", "/agents-api/sessions/{sid}/working-memory", {"k": "v"}),
    Route("GET", "/agents-api/tools"),
    # topics
    Route("GET", "/agents-api/topics/{tid}"),
    Route("GET", "/agents-api/topics/{tid}/evaluations"),
    Route("GET", "/agents-api/topics/{tid}/history"),
    Route("PUT", "/agents-api/topics/{tid}/memory", {"state": "promoted"}),
    Route("POST", "/agents-api/topics/{tid}/memory/cycle"),
    Route("GET", "/agents-api/topics/{tid}/notes"),
    # the org's own accounting
    Route("GET", "/agents-api/usage"),
    Route("GET", "/agents-api/limits"),
    # re-evaluation campaigns
    Route("POST", "/agents-api/reevaluations", {}),
    Route("GET", "/agents-api/reevaluations"),
    Route("GET", "/agents-api/reevaluations/{reevaluation_id}"),
    Route("DELETE", "/agents-api/reevaluations/{reevaluation_id}"),
    # the org's own model (bring your own key)
    Route("PUT", "/agents-api/provider", {"apiKey": "sk-probe", "model": "probe-model"}),
    Route("GET", "/agents-api/provider"),
    Route("DELETE", "/agents-api/provider"),
    # import into the caller's org (an NDJSON body; this one is refused at its line 1)
    Route("POST", "/agents-api/import", {"type": "header"}),
    # the org's webhook subscriptions
    Route("POST", "/agents-api/webhooks", {"url": "http://8.8.8.8/", "events": ["facts.changed"]}),
    Route("GET", "/agents-api/webhooks"),
    Route("DELETE", "/agents-api/webhooks/{webhook_id}"),
    Route("GET", "/agents-api/webhooks/{webhook_id}/deliveries"),
]

# Routes that name a resource of an org: another org's key must see 404 there. Those are
# the routes of a session, a topic or a re-evaluation, and reading an agent (it is not in
# the other org's namespace). The other routes name things in the caller's own namespace
# (PUT an agent, erase a user, a fact key, a scope), where another org's call acts on its
# own data.
SCOPED = [
    r
    for r in ROUTES
    if "{sid}" in r.path
    or "{tid}" in r.path
    or "{reevaluation_id}" in r.path
    or r == Route("GET", "/agents-api/agents/{agent_id}")
]

_ARGUMENT = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")  # <sid>, <path:filename>


def served_routes(app: Any) -> set[tuple[str, str]]:
    """(method, path) of every route of the app that needs a key, from its url_map."""
    return {
        (method, _ARGUMENT.sub(r"{\1}", rule.rule))
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith(PREFIX) and rule.rule not in PUBLIC
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}
    }


def unlisted_routes(app: Any) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(served but not in ROUTES, in ROUTES but not served)."""
    served, listed = served_routes(app), {(r.method, r.path) for r in ROUTES}
    return served - listed, listed - served
