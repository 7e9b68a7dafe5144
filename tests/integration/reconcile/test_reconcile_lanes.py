"""[4.1] A chat history's summary runs once, in the bulk lane, and a lost job keeps its
lane when the reconciler sends it again: an import's and a campaign's go to the bulk
lane, a live one to the live lane (docs/architecture.md "Lanes")."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import insert, select
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.models import Evaluation
from shared.evaluations.summarize import summarize_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import SUMMARIZE_TOPIC, Job, RecordingQueue
from shared.llm.local_provider import LocalProvider
from shared.reconcile.service import closed_topics_awaiting_summary
from shared.reevaluations.models import ReevaluationCampaign, ReevaluationItem
from shared.topics.models import Topic
from tests.helpers import new_session, post_message
from tests.integration.reconcile import test_reconcile as base
from tests.integration.reconcile.test_reconcile import GRACE, LosingQueue, jobs_for, new_uow

# test_reconcile's fixtures: a broker that loses every job, and the beat's run.
queue, reconcile = base.queue, base.reconcile

HISTORY = [
    {"role": "user", "content": "Which database for the ledger?"},
    {"role": "assistant", "content": "PostgreSQL: we need transactions."},
]


def _import_history(client: FlaskClient, auth: dict[str, str], queue: LosingQueue) -> str:
    """One chat history imported; its summary job (lost with the broker): its topic id."""
    marker = {"role": "user", "content": f"history {uuid.uuid4()}"}  # a new session each time
    response = client.post(
        "/agents-api/import?format=openai-chat&agentId=planner&userId=ada",
        data=json.dumps([*HISTORY, marker]).encode(), headers=auth,
    )  # fmt: skip
    assert response.status_code == 200, response.json
    (job,) = [j for j in queue.lost if j.task == SUMMARIZE_TOPIC]
    assert job.lane == "bulk" and job.kwargs["trigger"] == "import"
    topic_id: str = job.kwargs["topic_id"]
    return topic_id


def test_a_chat_history_is_summarized_once_under_the_import_trigger_41(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue,
    session_factory: sessionmaker[Session],
) -> None:  # fmt: skip
    topic_id = _import_history(client, auth, queue)
    outcome = summarize_topic(
        new_uow=new_uow(session_factory), llm=LocalProvider(), topic_id=uuid.UUID(topic_id),
        trigger="import",
    )  # fmt: skip
    assert outcome.outcome in ("refresh", "fallback")
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        topic = uow.session.get(Topic, uuid.UUID(topic_id))
        assert topic is not None and topic.summary
        triggers = uow.session.scalars(
            select(Evaluation.trigger).where(Evaluation.topic_id == topic.id)
        ).all()
        assert triggers == ["import"]
        # Nothing left for the reconciler to pay for a second time.
        later = dt.datetime.now(dt.UTC) + GRACE * 5
        assert topic.id not in closed_topics_awaiting_summary(uow=uow, closed_before=later)


def test_a_lost_import_summary_is_sent_again_in_the_bulk_lane_41(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue, reconcile: Any, org: str
) -> None:
    topic_id = _import_history(client, auth, queue)
    _, jobs = reconcile()
    kwargs = {"topic_id": topic_id, "trigger": "reconcile"}
    assert jobs_for(jobs, topic_id) == [Job(SUMMARIZE_TOPIC, kwargs, lane="bulk", org=org)]


def test_a_campaigns_lost_job_goes_bulk_and_a_live_one_live_41(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue, reconcile: Any,
    session_factory: sessionmaker[Session], org: str,
) -> None:  # fmt: skip
    closed = []
    for _ in range(2):
        session = new_session(client, auth)
        post_message(client, auth, session["id"], "We agreed to ship on Friday.")
        client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
        closed.append(session["activeTopicId"])
    campaign_topic, live_topic = closed
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        # The campaign's claim on its topic: its item, enqueued, until the job settles.
        campaign = uow.session.scalar(
            insert(ReevaluationCampaign)
            .values(org_id=org, origin="api", rate=0.001, total=1, enqueued=1, exhausted=True)
            .returning(ReevaluationCampaign.id)
        )
        uow.session.execute(
            insert(ReevaluationItem).values(
                campaign_id=campaign, topic_id=campaign_topic, enqueued_at=dt.datetime.now(dt.UTC)
            )
        )
        uow.commit()
    _, jobs = reconcile()
    kwargs = {"trigger": "reconcile"}
    assert jobs_for(jobs, campaign_topic) == [
        Job(SUMMARIZE_TOPIC, {"topic_id": campaign_topic, **kwargs}, lane="bulk", org=org)
    ]
    assert jobs_for(jobs, live_topic) == [
        Job(SUMMARIZE_TOPIC, {"topic_id": live_topic, **kwargs}, lane="live", org=org)
    ]
