"""R: every /agents-api route needs a key; the key's org scopes everything."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.routing import Map, Rule

from tests.helpers import new_session, post_message
from tests.integration.auth.routes import (
    PUBLIC,
    ROUTES,
    SCOPED,
    Route,
    served_routes,
    unlisted_routes,
)


def _call(
    client: FlaskClient, route: Route, headers: dict[str, str], **ids: str
) -> tuple[int, Any]:
    """The route's status and JSON answer (None for an event stream, which never ends)."""
    response = client.open(
        route.url(**ids), method=route.method, json=route.body, headers=headers, buffered=False
    )
    try:
        if response.mimetype == "text/event-stream":
            return response.status_code, None
        return response.status_code, response.json
    finally:
        response.close()


def test_every_authenticated_route_of_the_app_is_listed(app: Any) -> None:
    """routes.py is the matrices' list: a route the app serves is in it, and only those."""
    missing, gone = unlisted_routes(app)
    assert missing == set(), "served by the app but not in tests/integration/auth/routes.py"
    assert gone == set(), "in tests/integration/auth/routes.py but not served by the app"
    assert len({(r.method, r.path) for r in ROUTES}) == len(ROUTES)  # none listed twice
    assert served_routes(app)  # the url_map was read: a prefix that matched nothing fails


def test_a_route_added_to_the_app_without_being_listed_is_found(app: Any) -> None:
    app.add_url_rule(
        "/agents-api/sessions/<sid>/unlisted", "unlisted", lambda sid: {}, methods=["DELETE"]
    )
    app.add_url_rule(
        "/agents-api/topics/<uuid:tid>", "patch_topic", lambda tid: {}, methods=["PATCH"]
    )
    missing, gone = unlisted_routes(app)
    assert missing == {
        ("DELETE", "/agents-api/sessions/{sid}/unlisted"),
        ("PATCH", "/agents-api/topics/{tid}"),  # a new method on a listed path counts too
    }
    assert gone == set()


def test_a_listed_route_the_app_no_longer_serves_is_found(app: Any) -> None:
    notes = "/agents-api/topics/<tid>/notes"  # as if its view had been deleted
    rules = [
        Rule(r.rule, endpoint=r.endpoint, methods=r.methods)
        for r in app.url_map.iter_rules()
        if r.rule != notes
    ]
    without = SimpleNamespace(url_map=Map(rules))
    assert unlisted_routes(without) == (set(), {("GET", "/agents-api/topics/{tid}/notes")})


def _ids(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any], agent: str
) -> dict[str, str]:
    """Ids of the org of `auth`: its session's, and a re-evaluation it started."""
    reevaluation: Any = client.post("/agents-api/reevaluations", json={}, headers=auth).json
    return {
        "sid": session["id"],
        "tid": session["activeTopicId"],
        "agent_id": agent,
        "user_id": "user-1",
        "key": "k",
        # The org's own webhooks: isolation is the cross-tenant probe's (tests/faults).
        "webhook_id": "00000000-0000-4000-8000-000000000000",
        "reevaluation_id": reevaluation["id"],
    }


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer dl_not-a-key"}, {"Authorization": "Basic abc"}],
    ids=["no key", "bad key", "wrong scheme"],
)
def test_requests_without_a_valid_key_are_401(
    client: FlaskClient, auth: dict[str, str], route: Route, headers: dict[str, str]
) -> None:
    session = new_session(client, auth)
    status, answer = _call(client, route, headers, **_ids(client, auth, session, "a"))
    assert status == 401
    assert answer["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("route", SCOPED, ids=lambda r: f"{r.method} {r.path}")
def test_another_orgs_resources_are_404(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str], route: Route
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "private")
    client.put("/agents-api/agents/mine", json={"soul": "secret"}, headers=auth)
    ids = _ids(client, auth, session, "mine")
    status, answer = _call(client, route, other_auth, **ids)
    assert status == 404
    assert answer["error"]["code"] == "not_found"
    # ...and the owner still sees its data untouched.
    mine = client.get(f"/agents-api/sessions/{session['id']}/messages", headers=auth).json
    assert [m["content"] for m in mine["messages"]] == ["private"]  # type: ignore[index]
    # The same call with the owner's key succeeds: the 404 was isolation, not a bad probe.
    status, answer = _call(client, route, auth, **ids)
    assert 200 <= status < 300, answer


def test_the_same_agent_id_in_two_orgs_are_two_agents(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    client.put("/agents-api/agents/shared-name", json={"soul": "org one"}, headers=auth)
    client.put("/agents-api/agents/shared-name", json={"soul": "org two"}, headers=other_auth)
    assert client.get("/agents-api/agents/shared-name", headers=auth).json["soul"] == "org one"  # type: ignore[index]


@pytest.mark.parametrize("path", ["/healthz", *sorted(PUBLIC)])
def test_public_endpoints_need_no_key(client: FlaskClient, path: str) -> None:
    assert client.get(path).status_code == 200
