"""The summarization job's shape: watermark idempotency, R24 archiving, one audit row."""

from __future__ import annotations

import datetime as dt
import uuid

from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from shared.db.uow import UnitOfWork
from shared.evaluations.models import Evaluation
from shared.notes.models import NotesDocument
from shared.summaries.service import summarize_topic
from shared.topics.models import Topic
from shared.topics.reconcile import closed_topics_awaiting_summary
from tests.helpers import new_session, post_message


def _closed_topic_with_notes(client: FlaskClient, auth: dict[str, str], uow: UnitOfWork) -> str:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "  Plan   the Q3 launch budget  ")
    post_message(client, auth, session["id"], "Sure.", role="assistant")
    with uow:
        uow.session.add(NotesDocument(topic_id=uuid.UUID(session["activeTopicId"]), content="n"))
        uow.commit()
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    topic_id: str = session["activeTopicId"]
    return topic_id


def _evaluations(uow: UnitOfWork, topic_id: str) -> int:
    with uow:
        return int(
            uow.session.scalar(
                select(func.count()).where(Evaluation.topic_id == uuid.UUID(topic_id))
            )
            or 0
        )


def test_r24_summary_stored_and_notes_archived_together(
    client: FlaskClient, auth: dict[str, str], uow: UnitOfWork
) -> None:
    topic_id = _closed_topic_with_notes(client, auth, uow)
    with uow:
        outcome = summarize_topic(uow=uow, topic_id=uuid.UUID(topic_id), trigger="topic_closed")
        uow.commit()
    assert outcome.outcome == "refresh"
    topic = client.get(f"/agents-api/topics/{topic_id}", headers=auth).json
    assert topic is not None
    assert topic["summary"] == "Plan the Q3 launch budget"
    assert topic["summarizedAt"] is not None
    with uow:
        statuses = uow.session.scalars(
            select(NotesDocument.status).where(NotesDocument.topic_id == uuid.UUID(topic_id))
        ).all()
    assert statuses == ["archived"]


def test_a_repeated_job_for_an_unchanged_topic_writes_nothing(
    client: FlaskClient, auth: dict[str, str], uow: UnitOfWork
) -> None:
    topic_id = _closed_topic_with_notes(client, auth, uow)
    for _ in range(3):
        with uow:
            last = summarize_topic(uow=uow, topic_id=uuid.UUID(topic_id), trigger="topic_closed")
            uow.commit()
    assert last.outcome == "skipped"
    assert _evaluations(uow, topic_id) == 1


def test_a_job_for_a_deleted_topic_is_skipped(uow: UnitOfWork) -> None:
    with uow:
        outcome = summarize_topic(uow=uow, topic_id=uuid.uuid4(), trigger="reconcile")
    assert outcome.outcome == "skipped"


def test_reconcile_finds_closed_topics_whose_summary_job_was_lost(
    client: FlaskClient, auth: dict[str, str], uow: UnitOfWork
) -> None:
    topic_id = uuid.UUID(_closed_topic_with_notes(client, auth, uow))
    grace = dt.timedelta(seconds=60)
    with uow:
        assert topic_id not in closed_topics_awaiting_summary(uow=uow, older_than=grace)
        # Pretend it closed long ago and its job never ran.
        uow.session.execute(
            update(Topic)
            .where(Topic.id == topic_id)
            .values(closed_at=func.now() - dt.timedelta(minutes=5))
        )
        uow.commit()
    with uow:
        assert topic_id in closed_topics_awaiting_summary(uow=uow, older_than=grace)
        summarize_topic(uow=uow, topic_id=topic_id, trigger="reconcile")
        uow.commit()
    with uow:
        assert topic_id not in closed_topics_awaiting_summary(uow=uow, older_than=grace)
