"""Web → commit → Redis → worker → PostgreSQL, for real."""

from __future__ import annotations

import uuid
from typing import Any

from celery import Celery
from celery.signals import task_postrun
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.models import Evaluation
from shared.infra.queue import SUMMARIZE_TOPIC
from shared.topics.models import Topic
from tests.helpers import new_session, post_message, wait_for


def test_closing_a_topic_gets_it_summarized_by_the_worker(
    live_app: Any, live_auth: dict[str, str]
) -> None:
    client = live_app.test_client()
    session = new_session(client, live_auth)
    post_message(client, live_auth, session["id"], "Ship the beta on Friday")
    post_message(client, live_auth, session["id"], "Noted.", role="assistant")
    prior = session["activeTopicId"]
    response = client.post(f"/agents-api/sessions/{session['id']}/topics", headers=live_auth)
    assert response.status_code == 201

    def summarized() -> dict[str, Any] | None:
        topic: dict[str, Any] = client.get(f"/agents-api/topics/{prior}", headers=live_auth).json
        return topic if topic["summarizedAt"] else None

    topic = wait_for(summarized, what="the worker to summarize the closed topic")
    # The worker runs the offline `local` provider: an extractive summary of the topic.
    assert topic["summarySource"] == "llm"
    assert "beta" in topic["summary"] and "Friday" in topic["summary"]
    assert topic["title"] and topic["status"] == "closed"


def test_a_redelivered_summary_job_changes_nothing(
    live_app: Any,
    live_auth: dict[str, str],
    celery_app: Celery,
    committed_factory: sessionmaker[Session],
) -> None:
    client = live_app.test_client()
    session = new_session(client, live_auth)
    post_message(client, live_auth, session["id"], "Use Postgres for everything")
    topic_id = session["activeTopicId"]
    finished: list[str] = []

    def record(sender: Any = None, kwargs: Any = None, **_: Any) -> None:
        if sender is not None and sender.name == SUMMARIZE_TOPIC and kwargs["topic_id"] == topic_id:
            finished.append(kwargs["trigger"])

    task_postrun.connect(record, weak=False)
    try:
        client.post(f"/agents-api/sessions/{session['id']}/topics", headers=live_auth)
        # The close's job runs under its org's ticket (shared/infra/fair.py): watch the row.
        summarized_at = wait_for(
            lambda: _summarized_at(committed_factory, topic_id), what="the first summary"
        )
        # The same job delivered twice more, as acks_late redelivery would.
        for _ in range(2):
            celery_app.send_task(
                SUMMARIZE_TOPIC, kwargs={"topic_id": topic_id, "trigger": "reconcile"}
            )
        wait_for(lambda: len(finished) == 2 or None, what="both repeats to run")
    finally:
        task_postrun.disconnect(record)
    with committed_factory() as db:
        evaluations = db.scalar(
            select(func.count()).where(Evaluation.topic_id == uuid.UUID(topic_id))
        )
    assert evaluations == 1
    assert _summarized_at(committed_factory, topic_id) == summarized_at


def _summarized_at(factory: sessionmaker[Session], topic_id: str) -> Any:
    with factory() as db:
        return db.scalar(select(Topic.summarized_at).where(Topic.id == uuid.UUID(topic_id)))


def test_the_reconciler_recovers_a_summary_whose_job_was_lost(
    settings: Any,
    celery_app: Celery,
    celery_worker: Any,
    committed_factory: sessionmaker[Session],
    live_auth: dict[str, str],
) -> None:
    """The broker was unreachable after the commit: the beat job re-enqueues the summary."""
    from shared.infra.queue import RECONCILE
    from web.app import create_app

    class DownBroker:
        def send(self, job: Any) -> None:
            raise ConnectionError("broker unreachable")

    client = create_app(settings, queue=DownBroker()).test_client()
    session = new_session(client, live_auth)
    post_message(client, live_auth, session["id"], "Remember the staging password rotates")
    response = client.post(f"/agents-api/sessions/{session['id']}/topics", headers=live_auth)
    assert response.status_code == 201  # the user's request succeeded; the job was lost
    topic_id = session["activeTopicId"]
    assert _summarized_at(committed_factory, topic_id) is None

    def recovered() -> Any:
        celery_app.send_task(RECONCILE)  # what beat does every DRIFTLESS_RECONCILE_S
        return _summarized_at(committed_factory, topic_id)

    # The reconciler leaves a grace period (DRIFTLESS_RECONCILE_S) for the normal path.
    wait_for(recovered, timeout=settings.reconcile_s + 30, interval=0.5, what="the reconciler")
