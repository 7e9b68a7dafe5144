"""The reconciler finds closed topics whose summary job was lost, and only those."""

from __future__ import annotations

import datetime as dt
import uuid

from flask.testing import FlaskClient
from sqlalchemy import func, update
from sqlalchemy.orm import Session, sessionmaker

from shared.db.uow import UnitOfWork
from shared.llm.local_provider import LocalProvider
from shared.queue import RecordingQueue
from shared.summaries.service import summarize_topic
from shared.topics.models import Topic
from shared.topics.reconcile import closed_topics_awaiting_summary
from tests.helpers import new_session, post_message

GRACE = dt.timedelta(seconds=60)


def test_reconcile_finds_closed_topics_whose_summary_job_was_lost(
    client: FlaskClient,
    auth: dict[str, str],
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "We agreed to ship on Friday.")
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    topic_id = uuid.UUID(session["activeTopicId"])
    with uow:
        # Closed just now: the normal path still has its grace period.
        assert topic_id not in closed_topics_awaiting_summary(uow=uow, older_than=GRACE)
        uow.session.execute(
            update(Topic)
            .where(Topic.id == topic_id)
            .values(closed_at=func.now() - dt.timedelta(minutes=5))
        )
        uow.commit()
    with uow:
        assert topic_id in closed_topics_awaiting_summary(uow=uow, older_than=GRACE)
    summarize_topic(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()),
        llm=LocalProvider(),
        topic_id=topic_id,
        trigger="reconcile",
    )
    with uow:
        assert topic_id not in closed_topics_awaiting_summary(uow=uow, older_than=GRACE)


def test_a_job_for_a_deleted_topic_is_skipped(session_factory: sessionmaker[Session]) -> None:
    outcome = summarize_topic(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()),
        llm=LocalProvider(),
        topic_id=uuid.uuid4(),
        trigger="reconcile",
    )
    assert outcome.outcome == "skipped"
