"""R: every /agents-api route needs a key; the key's org scopes everything."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from tests.helpers import new_session, post_message
from tests.integration.routes import ROUTES, SCOPED, Route


def _call(client: FlaskClient, route: Route, headers: dict[str, str], **ids: str):  # type: ignore[no-untyped-def]
    return client.open(route.url(**ids), method=route.method, json=route.body, headers=headers)


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
    response = _call(
        client, route, headers, sid=session["id"], tid=session["activeTopicId"], agent="a"
    )
    assert response.status_code == 401
    assert response.json["error"]["code"] == "unauthorized"  # type: ignore[index]


@pytest.mark.parametrize("route", SCOPED, ids=lambda r: f"{r.method} {r.path}")
def test_another_orgs_resources_are_404(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str], route: Route
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "private")
    client.put("/agents-api/agents/mine", json={"soul": "secret"}, headers=auth)
    response = _call(
        client, route, other_auth, sid=session["id"], tid=session["activeTopicId"], agent="mine"
    )
    assert response.status_code == 404
    assert response.json["error"]["code"] == "not_found"  # type: ignore[index]
    # ...and the owner still sees its data untouched.
    mine = client.get(f"/agents-api/sessions/{session['id']}/messages", headers=auth).json
    assert [m["content"] for m in mine["messages"]] == ["private"]  # type: ignore[index]


def test_the_same_agent_id_in_two_orgs_are_two_agents(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    client.put("/agents-api/agents/shared-name", json={"soul": "org one"}, headers=auth)
    client.put("/agents-api/agents/shared-name", json={"soul": "org two"}, headers=other_auth)
    assert client.get("/agents-api/agents/shared-name", headers=auth).json["soul"] == "org one"  # type: ignore[index]


def test_public_endpoints_need_no_key(client: FlaskClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/agents-api/openapi.json").status_code == 200
