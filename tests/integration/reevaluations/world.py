"""Topics to re-evaluate, made through the API, and the campaign rows behind the answers."""

from __future__ import annotations

import uuid
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.reevaluations.models import ReevaluationCampaign
from tests.helpers import new_session, post_message


def topics_of(
    client: FlaskClient,
    auth: dict[str, str],
    *,
    closed: int,
    active: bool = True,
    agent: str = "planner",
    user: str = "ada",
) -> list[str]:
    """Ids of `closed` closed topics with messages (and, with `active`, the active one with
    a message) in a new session of the scope; its newest topic is empty unless active."""
    session = new_session(client, auth, agent=agent, user=user)
    sid, current, ids = session["id"], session["activeTopicId"], []
    for n in range(closed):
        post_message(client, auth, sid, f"We ship part {n} on Friday.")
        post_message(client, auth, sid, f"Part {n} ships Friday.", "assistant")
        ids.append(current)
        opened: Any = client.post(f"/agents-api/sessions/{sid}/topics", json={}, headers=auth).json
        current = opened["id"]
    if active:
        post_message(client, auth, sid, "Now the hiking trip.")
        ids.append(current)
    return ids


def start(
    client: FlaskClient, auth: dict[str, str], body: dict[str, Any] | None = None
) -> dict[str, Any]:
    response = client.post("/agents-api/reevaluations", json=body or {}, headers=auth)
    assert response.status_code == 202, response.json
    answer: dict[str, Any] = response.json  # type: ignore[assignment]
    return answer


def total_of(client: FlaskClient, auth: dict[str, str], body: dict[str, Any]) -> int:
    """The topics a campaign with this body covers; the campaign then cancelled, so that
    the org's cap (DRIFTLESS_CAMPAIGNS_PER_ORG) leaves room for the next one."""
    started = start(client, auth, body)
    if started["state"] == "running":
        cancelled = client.delete(f"/agents-api/reevaluations/{started['id']}", headers=auth)
        assert cancelled.status_code == 200, cancelled.json
    total: int = started["total"]
    return total


def campaign(
    client: FlaskClient, auth: dict[str, str], campaign_id: str | uuid.UUID
) -> dict[str, Any]:
    response = client.get(f"/agents-api/reevaluations/{campaign_id}", headers=auth)
    assert response.status_code == 200, response.json
    answer: dict[str, Any] = response.json  # type: ignore[assignment]
    return answer


def campaign_rows(factory: sessionmaker[Session]) -> int:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        return int(uow.session.scalar(select(func.count(ReevaluationCampaign.id))) or 0)


def summarized_by(
    factory: sessionmaker[Session], topic_id: str, *, prompt_version: str | None, model: str | None
) -> None:
    """As if the topic's current summary had been made by that prompt version and model."""
    with UnitOfWork(factory, RecordingQueue()) as uow:
        uow.session.execute(
            text(
                "UPDATE topics SET summarized_through_id = last_message_id,"
                " summary_prompt_version = :version, summary_model = :model WHERE id = :id"
            ),
            {"version": prompt_version, "model": model, "id": topic_id},
        )
        uow.commit()
