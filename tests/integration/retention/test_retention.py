"""Retention: idle sessions lose their raw messages and archived notes, never their memory.

Time is passed in (`now`), and idleness is made by moving a session's last activity back:
the database clock of a test is its transaction's start, the same for every row.
Assertions look only at this test's sessions: other tests may leave committed data.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.summarize import summarize_topic
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import (
    PURGE_IDLE_SESSIONS,
    SUMMARIZE_TOPIC,
    TASK_ROUTES,
    Job,
    RecordingQueue,
)
from shared.llm.local_provider import LocalProvider
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.retention.service import Purged, purge_idle_sessions
from shared.sessions.fork import fork_topic, record_fork
from shared.summaries.transcript import HEAD_MESSAGES, read_transcript
from shared.topics.models import Topic
from tests.helpers import new_session, post_message
from worker.app import beat_schedule

RETENTION = dt.timedelta(days=30)
MEMORY = "/agents-api/memory?agentId=agent-1&userId=user-1"
PLAN = [
    "Let's pick the billing database.", "PostgreSQL fits invoices.", "Agreed on PostgreSQL.",
    "Migrations with Alembic.", "Deadline is Friday.", "Noted, Friday.",
]  # fmt: skip


@pytest.fixture
def purge(session_factory: sessionmaker[Session], queue: RecordingQueue) -> Any:
    def run() -> Purged:
        return purge_idle_sessions(
            new_uow=lambda: UnitOfWork(session_factory, queue),
            now=dt.datetime.now(dt.UTC),
            retention=RETENTION,
        )

    return run


def summarize(session_factory: sessionmaker[Session], topic_id: str) -> None:
    outcome = summarize_topic(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), llm=LocalProvider(),
        topic_id=uuid.UUID(topic_id), trigger="topic_closed",
    )  # fmt: skip
    assert outcome.outcome in ("refresh", "fallback")


def go_idle(connection: Connection, session_id: str, days: int = 40) -> None:
    connection.execute(
        text("UPDATE sessions SET last_activity_at = now() - make_interval(days => :d)"
             " WHERE id = :s"),
        {"d": days, "s": session_id},
    )  # fmt: skip


def count(connection: Connection, sql: str, session_id: str) -> int:
    return int(connection.execute(text(sql), {"s": session_id}).scalar_one())


def messages_of(connection: Connection, session_id: str) -> int:
    return count(connection, "SELECT count(*) FROM messages WHERE session_id = :s", session_id)


def notes_of(connection: Connection, session_id: str, status: str) -> int:
    return count(
        connection,
        "SELECT count(*) FROM notes JOIN topics ON topics.id = notes.topic_id"
        f" WHERE topics.session_id = :s AND notes.status = '{status}'",
        session_id,
    )


def summarized_session(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> dict[str, Any]:
    """A promoted, summarized topic with notes (archived at its summary) and a tool call,
    then an active topic with working notes and a summarized message."""
    session = new_session(client, auth)
    sid, first = session["id"], session["activeTopicId"]
    for i, content in enumerate(PLAN):
        post_message(client, auth, sid, content, role="user" if i % 2 == 0 else "assistant")
    notes = client.post(
        f"/agents-api/sessions/{sid}/tools/notes",
        json={"arguments": {"op": "$set", "content": "billing: PostgreSQL"}},
        headers=auth,
    )
    assert notes.status_code == 200, notes.json
    client.put(f"/agents-api/topics/{first}/memory", json={"state": "promoted"}, headers=auth)
    second: Any = client.post(f"/agents-api/sessions/{sid}/topics", json={}, headers=auth).json
    summarize(session_factory, first)
    post_message(client, auth, sid, "Next: the onboarding emails.")
    client.post(
        f"/agents-api/sessions/{sid}/tools/notes",
        json={"arguments": {"op": "$set", "content": "emails: draft"}},
        headers=auth,
    )
    summarize(session_factory, second["id"])
    return {**session, "first": first, "second": second["id"]}


def test_an_idle_session_loses_messages_and_archived_notes_and_keeps_its_memory(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    connection: Connection, purge: Any, redis_url: str,
) -> None:  # fmt: skip
    old = summarized_session(client, auth, session_factory)
    recent = summarized_session(client, auth, session_factory)
    sid = old["id"]
    go_idle(connection, sid)
    topics_before: Any = client.get(f"/agents-api/sessions/{sid}", headers=auth).json
    memory_before: Any = client.get(MEMORY, headers=auth).json
    assert [e["topicId"] for e in memory_before["entries"]] == [old["first"], recent["first"]]
    old_messages, recent_messages = (
        messages_of(connection, sid),
        messages_of(connection, recent["id"]),
    )
    assert old_messages >= 9 and notes_of(connection, sid, "archived") == 1

    assert purge() == Purged(sessions=1, messages=old_messages, notes=1)
    # The storage bound: the raw rows are gone.
    assert messages_of(connection, sid) == 0
    assert notes_of(connection, sid, "archived") == 0
    assert notes_of(connection, sid, "active") == 1  # the active topic's working notes
    # The recent session is untouched.
    assert messages_of(connection, recent["id"]) == recent_messages
    assert notes_of(connection, recent["id"], "archived") == 1
    # What memory is made of stays: topics, titles, summaries, flags, the memory block.
    topics_after: Any = client.get(f"/agents-api/sessions/{sid}", headers=auth).json
    assert topics_after["topics"] == topics_before["topics"]
    assert all(t["title"] and t["summary"] for t in topics_after["topics"])
    org_id = connection.execute(
        text("SELECT org_id FROM sessions WHERE id = :s"), {"s": sid}
    ).scalar_one()
    MemoryCache(redis.Redis.from_url(redis_url)).invalidate(
        Scope(org_id=org_id, agent_id="agent-1", user_id="user-1")
    )  # rebuilt from PostgreSQL, not served from the cache
    assert client.get(MEMORY, headers=auth).json == memory_before
    # GET messages answers an empty page; a new message works and is listed.
    page: Any = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth).json
    assert page["messages"] == [] and page["nextAfterId"] is None
    posted = post_message(client, auth, sid, "Back after a month: the emails went out.")
    page = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth).json
    assert [m["id"] for m in page["messages"]] == [posted["id"]]


def test_a_second_run_deletes_nothing_more(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    connection: Connection, purge: Any,
) -> None:  # fmt: skip
    session = summarized_session(client, auth, session_factory)
    go_idle(connection, session["id"])
    assert purge().sessions == 1
    assert purge() == Purged()
    assert messages_of(connection, session["id"]) == 0


def test_an_unsummarized_session_gets_its_summary_first_and_keeps_its_messages(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    connection: Connection, purge: Any, queue: RecordingQueue, org: str,
) -> None:  # fmt: skip
    session = new_session(client, auth)
    sid, topic_id = session["id"], session["activeTopicId"]
    for content in PLAN[:3]:
        post_message(client, auth, sid, content)
    go_idle(connection, sid)
    queue.sent.clear()

    assert purge() == Purged(deferred=1)
    assert messages_of(connection, sid) == 3  # nothing a summary has not seen is deleted
    assert [j for j in queue.sent if j.kwargs.get("topic_id") == topic_id] == [
        Job(SUMMARIZE_TOPIC, {"topic_id": topic_id, "trigger": "retention"}, org=org)
    ]
    summarize_topic(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), llm=LocalProvider(),
        topic_id=uuid.UUID(topic_id), trigger="retention",
    )  # fmt: skip
    purge()
    assert messages_of(connection, sid) == 0
    topic: Any = client.get(f"/agents-api/topics/{topic_id}", headers=auth).json
    assert topic["summary"] and topic["title"]


def test_a_session_active_again_after_its_purge_is_purged_again_only_when_idle(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    connection: Connection, purge: Any,
) -> None:  # fmt: skip
    session = summarized_session(client, auth, session_factory)
    sid = session["id"]
    go_idle(connection, sid)
    purge()
    post_message(client, auth, sid, "A new question.")
    purge()  # active again: not idle
    assert messages_of(connection, sid) == 1
    summarize(session_factory, session["second"])  # the new message, after the gap
    go_idle(connection, sid, days=35)  # idle again, since a later time than the first
    # The second summary's evaluation row replaces the first as the topic's latest.
    assert purge() == Purged(sessions=1, messages=1, evaluations=1)
    assert messages_of(connection, sid) == 0


def test_a_forked_session_with_tool_messages_purges_without_foreign_key_errors(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    connection: Connection, purge: Any,
) -> None:  # fmt: skip
    session = summarized_session(client, auth, session_factory)
    sid = session["id"]
    ids = [post_message(client, auth, sid, f"Hiking, part {i}.")["id"] for i in range(4)]
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        forked = fork_topic(
            uow=uow, topic_id=uuid.UUID(session["second"]), first_message_id=ids[2],
            new_title="Hiking",
        )  # fmt: skip
        assert forked is not None
        record_fork(uow=uow, forked=forked, first_message_id=ids[2])
        new_topic = str(forked.new.id)
        uow.commit()
    summarize(session_factory, session["second"])
    summarize(session_factory, new_topic)
    go_idle(connection, sid)
    assert purge().evaluations >= 1  # the second topic was evaluated more than once
    assert messages_of(connection, sid) == 0
    assert count(connection, "SELECT count(*) FROM forks WHERE session_id = :s", sid) == 1
    # Each topic keeps its latest evaluation; older ones went with the messages.
    per_topic = connection.execute(
        text(
            "SELECT count(evaluations.id) FROM topics"
            " LEFT JOIN evaluations ON evaluations.topic_id = topics.id"
            " WHERE topics.session_id = :s GROUP BY topics.id"
        ),
        {"s": sid},
    ).scalars()
    assert sorted(per_topic) == [1, 1, 1]


def test_no_foreign_key_points_at_messages(connection: Connection) -> None:
    """Why deleting messages cannot fail on another table's rows."""
    referencing = connection.execute(
        text(
            "SELECT conrelid::regclass::text FROM pg_constraint"
            " WHERE contype = 'f' AND confrelid = 'messages'::regclass"
        )
    ).all()
    assert referencing == []


def test_the_beat_runs_retention_on_the_fast_queue_only_when_it_is_on(settings: Settings) -> None:
    on = beat_schedule(settings.model_copy(update={"retention_s": 86_400, "retention_sweep_s": 60}))
    assert on["retention"] == {"task": PURGE_IDLE_SESSIONS, "schedule": 60.0}
    assert "retention" not in beat_schedule(settings.model_copy(update={"retention_s": 0}))
    assert TASK_ROUTES[PURGE_IDLE_SESSIONS] == {"queue": "fast"}


@pytest.fixture
def purged_session(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    connection: Connection, purge: Any,
) -> dict[str, Any]:  # fmt: skip
    """A summarized session left idle past the retention, then purged."""
    session = summarized_session(client, auth, session_factory)
    go_idle(connection, session["id"])
    purge()
    return session


def test_a_purged_topic_resummarized_under_a_new_prompt_keeps_its_summary(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    connection: Connection, purged_session: dict[str, Any],
) -> None:  # fmt: skip
    """`driftless reevaluate` after a prompt change: no LLM call on an empty transcript."""
    session = purged_session
    before: Any = client.get(f"/agents-api/topics/{session['first']}", headers=auth).json
    connection.execute(
        text("UPDATE topics SET summary_prompt_version = 'v0', message_count = 500 WHERE id = :t"),
        {"t": session["first"]},
    )  # an older prompt, and a topic long enough to be sent head and tail
    outcome = summarize_topic(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), llm=LocalProvider(),
        topic_id=uuid.UUID(session["first"]), trigger="reevaluate",
    )  # fmt: skip
    assert outcome.outcome == "skipped"
    after: Any = client.get(f"/agents-api/topics/{session['first']}", headers=auth).json
    assert (after["title"], after["summary"], after["memoryState"]) == (
        before["title"], before["summary"], "promoted",
    )  # fmt: skip


def test_a_short_topic_resumed_after_its_purge_is_summarized_with_its_previous_summary(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    purged_session: dict[str, Any],
) -> None:  # fmt: skip
    """The purged messages live on only in the summary: the next one must build on it."""
    session = purged_session
    resumed = [post_message(client, auth, session["id"], "Back again.")]
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        topic = uow.session.get(Topic, uuid.UUID(session["second"]))
        assert topic is not None and topic.summary
        total = topic.message_count + topic.tool_message_count
        assert total <= HEAD_MESSAGES  # short: the whole topic would fit in one request
        request = read_transcript(
            uow=uow, topic_id=topic.id, through_id=resumed[-1]["id"],
            total_messages=total, notes=None,
            previous_summary=topic.summary,
        )  # fmt: skip
    assert [line.id for line in request.lines] == [m["id"] for m in resumed]
    assert request.previous_summary == topic.summary
    assert request.omitted == total - 1


def test_a_run_walks_past_sessions_waiting_for_a_summary_and_stops_at_its_cap(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    connection: Connection,
) -> None:  # fmt: skip
    waiting = new_session(client, auth)
    post_message(client, auth, waiting["id"], "Not summarized yet.")
    done = [summarized_session(client, auth, session_factory) for _ in range(2)]
    for session, days in ((waiting, 50), (done[0], 45), (done[1], 40)):
        go_idle(connection, session["id"], days=days)

    def run(**limits: int) -> Purged:
        return purge_idle_sessions(
            new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()),
            now=dt.datetime.now(dt.UTC), retention=RETENTION, **limits,
        )  # fmt: skip

    # The cap: one session looked at, the longest idle, which must wait for its summary.
    assert run(max_sessions=1) == Purged(deferred=1)
    assert messages_of(connection, done[0]["id"]) > 0
    # Pages of one: the cursor moves past the waiting session to the other two.
    purged = run(batch=1)
    assert (purged.sessions, purged.deferred) == (2, 1)
    assert [messages_of(connection, s["id"]) for s in done] == [0, 0]
    assert messages_of(connection, waiting["id"]) == 1
