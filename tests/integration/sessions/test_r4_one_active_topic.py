"""R4: exactly one active topic per session, under concurrency and at the database level."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import Connection, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import create_api_key
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.sessions.models import Message
from shared.topics.models import Topic
from tests.helpers import new_session

WRITERS = 8


@pytest.fixture
def live_client(settings: Settings, committed_factory: sessionmaker[Session]) -> Any:
    """A client whose requests really commit, so concurrent requests meet in PostgreSQL."""
    from web.app import create_app

    app = create_app(settings, queue=RecordingQueue(), session_factory=committed_factory)
    return app


@pytest.fixture
def live_auth(committed_factory: sessionmaker[Session]) -> dict[str, str]:
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        key = create_api_key(uow=uow, org_name=f"r4-{uuid.uuid4().hex[:8]}")
        uow.commit()
    return {"Authorization": f"Bearer {key}"}


def _in_parallel(count: int, work: Any) -> list[Any]:
    results: list[Any] = [None] * count
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_r4_concurrent_new_topic_requests_leave_one_active_topic(
    live_client: Any, live_auth: dict[str, str], committed_factory: sessionmaker[Session]
) -> None:
    session = new_session(live_client.test_client(), live_auth)

    def open_topic(index: int) -> int:
        response = live_client.test_client().post(
            f"/agents-api/sessions/{session['id']}/topics",
            json={"title": f"t{index}"},
            headers=live_auth,
        )
        return int(response.status_code)

    statuses = _in_parallel(WRITERS, open_topic)
    assert statuses == [201] * WRITERS  # serialized by the session lock, none rejected
    with committed_factory() as db:
        topics = db.scalars(select(Topic).where(Topic.session_id == uuid.UUID(session["id"])))
        by_status = sorted(t.status for t in topics)
    assert by_status == ["active"] + ["closed"] * WRITERS


def test_r4_messages_racing_new_topics_are_neither_lost_nor_duplicated(
    live_client: Any, live_auth: dict[str, str], committed_factory: sessionmaker[Session]
) -> None:
    session = new_session(live_client.test_client(), live_auth)

    def work(index: int) -> int:
        client = live_client.test_client()
        if index % 3 == 0:
            url = f"/agents-api/sessions/{session['id']}/topics"
            return int(client.post(url, json={}, headers=live_auth).status_code)
        url = f"/agents-api/sessions/{session['id']}/messages"
        body = {"role": "user", "content": f"m{index}"}
        return int(client.post(url, json=body, headers=live_auth).status_code)

    statuses = _in_parallel(12, work)
    assert set(statuses) == {201}
    sid = uuid.UUID(session["id"])
    with committed_factory() as db:
        contents = db.scalars(select(Message.content).where(Message.session_id == sid)).all()
        counted = db.scalar(select(func.sum(Topic.message_count)).where(Topic.session_id == sid))
        active = db.scalar(
            select(func.count()).where(Topic.session_id == sid, Topic.status == "active")
        )
    assert sorted(contents) == sorted(f"m{i}" for i in range(12) if i % 3)
    assert counted == len(contents)  # the counters agree with the rows
    assert active == 1


def test_r4_the_database_refuses_a_second_active_topic(
    connection: Connection, uow: UnitOfWork, client: Any, auth: dict[str, str]
) -> None:
    session = new_session(client, auth)
    with pytest.raises(IntegrityError, match="uq_topics_one_active_per_session"):
        connection.execute(
            text("INSERT INTO topics (id, session_id, status, keep_in_memory,"
                 " keep_in_memory_manually_set, deprecated, deprecated_manually_set,"
                 " message_count, tool_message_count)"
                 " VALUES (gen_random_uuid(), :sid, 'active', false, false, false, false, 0, 0)"),
            {"sid": session["id"]},
        )  # fmt: skip
