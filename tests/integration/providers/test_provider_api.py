"""PUT, GET and DELETE /agents-api/provider: an org's own model, its key sealed and never
shown, its base URL under the webhooks' public-address rule, nothing written when refused."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import RecordingQueue
from shared.infra.sealing import SecretBox
from shared.llm.factory import configured_model
from shared.providers.models import OrgProvider
from tests.services import SEALING_KEY

API_KEY = "sk-org-own-4f1c9e2b7a"
OWN = {"baseUrl": "https://93.184.215.14/v1", "apiKey": API_KEY, "model": "org-model-1"}


def _rows(session_factory: sessionmaker[Session]) -> list[OrgProvider]:
    with session_factory() as session:
        return list(session.scalars(select(OrgProvider)))


def test_an_org_sets_its_model_and_sees_everything_but_the_key(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    put = client.put("/agents-api/provider", json=OWN, headers=auth)

    assert put.status_code == 200, put.json
    shown: Any = client.get("/agents-api/provider", headers=auth).json
    assert shown["source"] == "org" and shown["model"] == "org-model-1"
    assert shown["baseUrl"] == OWN["baseUrl"] and shown["updatedAt"]
    for answer in (put, client.get("/agents-api/provider", headers=auth)):
        assert API_KEY not in answer.get_data(as_text=True)
        assert "apiKey" not in answer.get_data(as_text=True)
    (row,) = _rows(session_factory)
    assert API_KEY not in row.sealed_api_key  # sealed at rest
    assert SecretBox(SEALING_KEY).open(row.sealed_api_key) == API_KEY


def test_a_second_put_replaces_the_first_and_the_base_url_may_be_the_fleets(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    client.put("/agents-api/provider", json=OWN, headers=auth)
    again = client.put(
        "/agents-api/provider", json={"apiKey": "sk-2", "model": "org-model-2"}, headers=auth
    )

    assert again.status_code == 200, again.json
    assert (again.json or {})["baseUrl"] is None  # the fleet's server, the org's key
    (row,) = _rows(session_factory)
    assert (row.model, row.base_url) == ("org-model-2", None)


def test_delete_returns_the_org_to_the_fleet_model(
    client: FlaskClient, auth: dict[str, str], settings: Settings
) -> None:
    client.put("/agents-api/provider", json=OWN, headers=auth)

    assert client.delete("/agents-api/provider", headers=auth).status_code == 204
    shown: Any = client.get("/agents-api/provider", headers=auth).json
    assert shown == {
        "source": "fleet",
        "model": configured_model(settings),
        "baseUrl": None,
        "updatedAt": None,
    }
    assert client.delete("/agents-api/provider", headers=auth).status_code == 204  # idempotent


def test_one_orgs_model_is_not_anothers(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    client.put("/agents-api/provider", json=OWN, headers=auth)

    other: Any = client.get("/agents-api/provider", headers=other_auth).json
    assert other["source"] == "fleet"
    client.delete("/agents-api/provider", headers=other_auth)
    assert (client.get("/agents-api/provider", headers=auth).json or {})["source"] == "org"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({**OWN, "baseUrl": "ftp://93.184.215.14/v1"}, "baseUrl: must be an http"),
        ({**OWN, "baseUrl": "not a url"}, "baseUrl: not a valid URL"),
        ({**OWN, "baseUrl": "https://user:pw@93.184.215.14/"}, "baseUrl: must not carry"),
        ({**OWN, "baseUrl": "http://127.0.0.1:8000/v1"}, "baseUrl: not a public address"),
        ({**OWN, "baseUrl": "http://169.254.169.254/"}, "baseUrl: not a public address"),
        ({**OWN, "baseUrl": "http://10.0.0.7/v1"}, "baseUrl: not a public address"),
        ({**OWN, "baseUrl": "http://[::ffff:127.0.0.1]/"}, "baseUrl: not a public address"),
        ({**OWN, "model": "two words"}, "model: must not hold spaces"),
        ({**OWN, "apiKey": "sk-1\r\nX-Injected: 1"}, "apiKey: must not hold spaces"),
        ({**OWN, "apiKey": "   "}, "apiKey: must not be empty"),
    ],
)
def test_a_refused_provider_is_a_422_naming_the_problem_and_writes_nothing(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    body: dict[str, str],
    named: str,
) -> None:
    response = client.put("/agents-api/provider", json=body, headers=auth)

    assert response.status_code == 422, response.json
    assert (response.json or {})["error"]["message"].startswith(named)
    assert _rows(session_factory) == []


@pytest.mark.parametrize("missing", ["apiKey", "model"])
def test_a_provider_without_its_key_or_model_is_refused_naming_the_field(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session], missing: str
) -> None:
    body = {name: value for name, value in OWN.items() if name != missing}

    response = client.put("/agents-api/provider", json=body, headers=auth)

    assert response.status_code == 422
    assert missing in (response.json or {})["error"]["message"]
    assert _rows(session_factory) == []


def test_the_provider_routes_need_a_key(client: FlaskClient) -> None:
    assert client.get("/agents-api/provider").status_code == 401
    assert client.put("/agents-api/provider", json=OWN).status_code == 401
    assert client.delete("/agents-api/provider").status_code == 401


def test_without_a_sealing_key_an_orgs_model_key_is_refused_409_and_nothing_is_written_41(
    settings: Settings,
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
    auth: dict[str, str],
) -> None:
    from web.app import create_app

    unsealed = settings.model_copy(update={"secret_keys": None})
    client = create_app(unsealed, queue=queue, session_factory=session_factory).test_client()

    response = client.put("/agents-api/provider", json=OWN, headers=auth)

    assert response.status_code == 409, response.json
    error = (response.json or {})["error"]
    assert error["code"] == "sealing_key_missing"
    assert "DRIFTLESS_SECRET_KEYS" in error["message"]
    assert _rows(session_factory) == []
