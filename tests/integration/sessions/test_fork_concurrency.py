"""R4 + R6 under load: concurrent writers while silent forks happen, all committed for real."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.pipeline import evaluate_topic
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.base import Completion, DriftRequest, SummaryRequest
from shared.sessions.models import Message
from shared.sessions.service import active_topic
from shared.topics.models import Topic
from tests.conftest import new_key
from tests.helpers import new_session

WRITERS, MESSAGES_EACH, FORKS = 4, 25, 6


class AlwaysDrifts:
    """Answers drift at the middle of every window, as a model seeing constant change."""

    model = "always-drifts"

    def detect_drift(self, request: DriftRequest) -> Completion:
        middle = request.window[len(request.window) // 2].id if request.window else None
        answer = {"drift": True, "first_message_id": middle, "new_title": "next"}
        return Completion(text=json.dumps(answer), model=self.model)

    def summarize(self, request: SummaryRequest) -> Completion:
        answer = {"title": "t", "summary": "s", "include_in_memory": False}
        return Completion(text=json.dumps(answer), model=self.model)


def test_r6_concurrent_writers_and_forks_lose_nothing_and_keep_one_active_topic(
    settings: Settings, committed_factory: sessionmaker[Session]
) -> None:
    from web.app import create_app

    app = create_app(settings, queue=RecordingQueue(), session_factory=committed_factory)
    auth = {"Authorization": f"Bearer {new_key(committed_factory)}"}
    session = new_session(app.test_client(), auth)
    sid = uuid.UUID(session["id"])
    posted: list[int] = []
    lock = threading.Lock()

    def write(writer: int) -> None:
        client = app.test_client()
        for i in range(MESSAGES_EACH):
            response = client.post(
                f"/agents-api/sessions/{sid}/messages",
                json={"role": "user" if i % 2 else "assistant", "content": f"w{writer} m{i}"},
                headers=auth,
            )
            assert response.status_code == 201
            with lock:
                posted.append(response.json["id"])  # type: ignore[index]

    def fork() -> None:
        new_uow = lambda: UnitOfWork(committed_factory, RecordingQueue())  # noqa: E731
        for _ in range(FORKS):
            with new_uow() as uow:
                topic_id = active_topic(uow=uow, session_id=sid).id
            evaluate_topic(
                new_uow=new_uow, llm=AlwaysDrifts(), topic_id=topic_id, trigger="manual",
                scan_back=10,
            )  # fmt: skip

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    threads.append(threading.Thread(target=fork))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    with committed_factory() as db:
        stored = db.scalars(select(Message.id).where(Message.session_id == sid)).all()
        topics = db.scalars(select(Topic).where(Topic.session_id == sid)).all()
        per_topic: Any = dict(
            db.execute(
                select(Message.topic_id, func.count())
                .where(Message.session_id == sid)
                .group_by(Message.topic_id)
            ).all()
        )
    assert sorted(stored) == sorted(posted)  # nothing lost, nothing twice
    assert len(posted) == WRITERS * MESSAGES_EACH
    assert sum(1 for t in topics if t.status == "active") == 1
    assert len(topics) > 1  # forks happened while the writers wrote
    for topic in topics:  # the counters agree with the rows after every move
        assert topic.message_count == per_topic.get(topic.id, 0)
