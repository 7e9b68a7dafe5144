"""POST/GET/DELETE /agents-api/reevaluations: a campaign over the calling org's matching
topics, its progress, its cancellation; another org's is 404 like a missing one, and bad
input is 422 naming the field with nothing written."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.reevaluations.pump import advance_campaign
from tests.integration.reevaluations.world import (
    campaign,
    campaign_rows,
    start,
    topics_of,
    total_of,
)

CAMPAIGN_FIELDS = {
    "id", "state", "total", "enqueued", "done", "failed", "agentId", "userId", "since",
    "rate", "createdAt", "finishedAt",
}  # fmt: skip


def test_a_campaign_covers_the_calling_orgs_topics_with_messages(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    topics_of(client, auth, closed=2)  # two closed and the active one
    topics_of(client, auth, closed=1, active=False, user="bob")  # its newest topic is empty
    topics_of(client, other_auth, closed=3)  # another org's: never counted

    started = start(client, auth)

    assert set(started) == {"id", "state", "total"}
    assert (started["state"], started["total"]) == ("running", 4)
    shown = campaign(client, auth, started["id"])
    assert set(shown) == CAMPAIGN_FIELDS
    assert (shown["enqueued"], shown["done"], shown["failed"]) == (0, 0, 0)
    assert (shown["rate"], shown["agentId"], shown["finishedAt"]) == (5.0, None, None)


def test_agent_user_and_since_narrow_the_campaign(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    older = topics_of(client, auth, closed=1, user="ada")
    newer = topics_of(client, auth, closed=1, user="ada")
    topics_of(client, auth, closed=1, agent="coder", user="ada")
    since = client.get(f"/agents-api/topics/{newer[0]}", headers=auth).json["createdAt"]  # type: ignore[index]

    assert total_of(client, auth, {"userId": "ada"}) == len(older) + len(newer) + 2
    assert total_of(client, auth, {"agentId": "planner", "userId": "ada"}) == 4
    assert total_of(client, auth, {"agentId": "planner", "since": since}) == len(newer)
    assert total_of(client, auth, {"userId": "bob"}) == 0


def test_a_campaign_with_nothing_to_do_is_finished_at_once(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    started = start(client, auth, {"agentId": "nobody"})

    assert (started["state"], started["total"]) == ("finished", 0)
    assert campaign(client, auth, started["id"])["finishedAt"] is not None


def test_the_list_is_the_orgs_own_campaigns_newest_first(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    topics_of(client, auth, closed=1)
    first, second = start(client, auth), start(client, auth, {"rate": 0.5})
    start(client, other_auth)

    listed: Any = client.get("/agents-api/reevaluations", headers=auth).json

    assert [c["id"] for c in listed["reevaluations"]] == [second["id"], first["id"]]
    assert listed["reevaluations"][0]["rate"] == 0.5


def test_another_orgs_campaign_is_404_exactly_like_a_missing_one(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    topics_of(client, auth, closed=1)
    mine = start(client, auth)["id"]
    missing = str(uuid.uuid4())

    for method in ("GET", "DELETE"):
        theirs = client.open(f"/agents-api/reevaluations/{mine}", method=method, headers=other_auth)
        unknown = client.open(f"/agents-api/reevaluations/{missing}", method=method, headers=auth)
        assert theirs.status_code == unknown.status_code == 404
        assert theirs.json == json.loads(unknown.get_data(as_text=True).replace(missing, mine))

    assert campaign(client, auth, mine)["state"] == "running"  # the DELETE changed nothing
    assert client.get("/agents-api/reevaluations", headers=other_auth).json == {"reevaluations": []}


def test_cancel_stops_enqueuing_and_answers_the_cancelled_campaign(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    topics_of(client, auth, closed=4)
    started = start(client, auth, {"rate": 2})
    created = dt.datetime.fromisoformat(campaign(client, auth, started["id"])["createdAt"])
    campaign_id = uuid.UUID(started["id"])

    def tick(seconds: float) -> int:
        with UnitOfWork(session_factory, queue) as uow:
            at = created + dt.timedelta(seconds=seconds)
            enqueued = advance_campaign(uow=uow, campaign_id=campaign_id, now=at).enqueued
            uow.commit()
        return enqueued

    assert tick(1) == 2
    cancelled = client.delete(f"/agents-api/reevaluations/{started['id']}", headers=auth)

    assert cancelled.status_code == 200
    body: Any = cancelled.json
    assert (body["state"], body["enqueued"], body["total"]) == ("cancelled", 2, 5)
    assert body["finishedAt"] is not None
    sent = len(queue.sent)
    assert tick(60) == 0
    assert len(queue.sent) == sent  # nothing more was enqueued
    again = client.delete(f"/agents-api/reevaluations/{started['id']}", headers=auth)
    assert (again.status_code, again.json) == (200, body)  # a retried DELETE: unchanged


def test_cancelling_a_finished_campaign_is_409(client: FlaskClient, auth: dict[str, str]) -> None:
    finished = start(client, auth, {"agentId": "nobody"})

    response = client.delete(f"/agents-api/reevaluations/{finished['id']}", headers=auth)

    assert response.status_code == 409
    error: Any = response.json
    assert error["error"]["code"] == "conflict"
    assert "finished" in error["error"]["message"]
    assert campaign(client, auth, finished["id"])["state"] == "finished"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"rate": 0}, "rate"),
        ({"rate": -1}, "rate"),
        ({"rate": 0.05}, "rate"),
        ({"rate": 1e6}, "rate"),
        ({"rate": "5"}, "rate"),
        ({"rate": True}, "rate"),
        ({"since": "2026-01-01T00:00:00"}, "since"),  # no timezone: which moment?
        ({"since": "2026-01-01"}, "since"),
        ({"since": "yesterday"}, "since"),
        ({"since": 1700000000}, "since"),
        ({"agentId": ""}, "agentId"),
        ({"agentId": "   "}, "agentId"),
        ({"agentId": "x" * 201}, "agentId"),
        ({"agentId": 5}, "agentId"),
        ({"userId": ["ada"]}, "userId"),
        ({"topicIds": []}, "topicIds"),  # an unknown field
    ],
)
def test_bad_input_is_422_naming_the_field_and_writes_nothing(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    body: dict[str, Any],
    field: str,
) -> None:
    topics_of(client, auth, closed=1)
    before = campaign_rows(session_factory)

    response = client.post("/agents-api/reevaluations", json=body, headers=auth)

    assert response.status_code == 422, response.json
    error: Any = response.json
    assert error["error"]["code"] == "validation_error"
    assert error["error"]["message"].startswith(f"{field}:"), error
    assert campaign_rows(session_factory) == before


@pytest.mark.parametrize("raw", ['{"rate": NaN}', '{"rate": Infinity}', "[]", '"all"'])
def test_a_body_that_is_not_a_json_object_of_numbers_is_422(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session], raw: str
) -> None:
    before = campaign_rows(session_factory)
    response = client.post(
        "/agents-api/reevaluations", data=raw, content_type="application/json", headers=auth
    )
    assert response.status_code == 422, response.json
    assert campaign_rows(session_factory) == before


def test_an_id_that_is_not_a_uuid_is_422_naming_it(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    response = client.get("/agents-api/reevaluations/not-a-uuid", headers=auth)
    assert response.status_code == 422
    assert "reevaluation_id" in response.json["error"]["message"]  # type: ignore[index]
