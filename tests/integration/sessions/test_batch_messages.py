"""POST …/messages with `{messages: [...]}`: stored in order, all or none, one heartbeat
per batch (R26's batch decision), and `?context=true` for one round trip per turn."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.domain.errors import Invalid
from shared.domain.limits import MAX_BATCH_MESSAGES, MAX_MESSAGE_CHARS
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EVALUATE_TOPIC, RecordingQueue
from shared.sessions.models import Message
from shared.sessions.posting import NewMessage, PostedMessages, post_messages
from shared.sessions.service import create_session, open_topic
from tests.conftest import new_key
from tests.helpers import committed_session, new_session, post_message


def _turns(count: int, *, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
        for i in range(start, start + count)
    ]


def _post_batch(
    client: FlaskClient, auth: dict[str, str], sid: str, messages: list[dict[str, Any]], query=""
) -> Any:
    return client.post(
        f"/agents-api/sessions/{sid}/messages{query}", json={"messages": messages}, headers=auth
    )


def _stored(client: FlaskClient, auth: dict[str, str], sid: str) -> list[dict[str, Any]]:
    listed = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth).json
    assert listed is not None
    messages: list[dict[str, Any]] = listed["messages"]
    return messages


def _heartbeats(queue: RecordingQueue) -> list[dict[str, Any]]:
    return [job.kwargs for job in queue.sent if job.task == EVALUATE_TOPIC]


def test_a_batch_is_stored_in_order_in_the_active_topic_with_one_answer_per_message(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth)
    turns = [*_turns(3), {"role": "tool", "content": "{}", "toolName": "notes", "toolCallId": "c1"}]
    response = _post_batch(client, auth, session["id"], turns)
    assert response.status_code == 201, response.json
    body = response.json
    assert set(body) == {"messages", "driftEvaluationEnqueued"}
    ids = [m["id"] for m in body["messages"]]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert {m["topicId"] for m in body["messages"]} == {session["activeTopicId"]}
    stored = _stored(client, auth, session["id"])
    assert [m["id"] for m in stored] == ids
    assert [(m["role"], m["content"]) for m in stored] == [(t["role"], t["content"]) for t in turns]
    assert stored[3]["toolName"] == "notes" and stored[3]["toolCallId"] == "c1"
    topic = client.get(f"/agents-api/topics/{session['activeTopicId']}", headers=auth).json
    assert topic is not None
    assert topic["messageCount"] == 3  # the tool message is not counted (R7)


def test_r26_batch_decision_crossing_two_multiples_of_10_enqueues_one_evaluation(
    client: FlaskClient, auth: dict[str, str], queue: RecordingQueue
) -> None:
    session = new_session(client, auth)
    for i in range(8):
        post_message(client, auth, session["id"], f"m{i}")
    assert _heartbeats(queue) == []

    crossing = _post_batch(client, auth, session["id"], _turns(15))  # 8 -> 23: crosses 10, 20
    assert crossing.status_code == 201
    assert crossing.json["driftEvaluationEnqueued"] is True
    assert _heartbeats(queue) == [{"topic_id": session["activeTopicId"], "trigger": "heartbeat"}]

    short = _post_batch(client, auth, session["id"], _turns(3))  # 23 -> 26: crosses nothing
    assert short.json["driftEvaluationEnqueued"] is False
    tools = [{"role": "tool", "content": "{}"}] * 5  # tools alone never count (R7)
    assert _post_batch(client, auth, session["id"], tools).json["driftEvaluationEnqueued"] is False
    reaching = _post_batch(client, auth, session["id"], _turns(4))  # 26 -> 30: reaches 30
    assert reaching.json["driftEvaluationEnqueued"] is True
    assert len(_heartbeats(queue)) == 2


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"role": "robot", "content": "x"}, "messages.2.role"),
        ({"role": "user"}, "messages.2.content"),
        ({"role": "user", "content": "x" * (MAX_MESSAGE_CHARS + 1)}, "messages.2.content"),
        ({"role": "user", "content": "x", "toolName": "t"}, "messages.2"),
        ({"role": "user", "content": "x", "extra": 1}, "messages.2.extra"),
        ({"role": "user", "content": "nul \u0000 byte"}, "messages.2.content"),
    ],
)
def test_one_bad_message_rejects_the_whole_batch_naming_it_and_writes_nothing(
    client: FlaskClient, auth: dict[str, str], queue: RecordingQueue, bad: Any, field: str
) -> None:
    session = new_session(client, auth)
    batch = [*_turns(2), bad, *_turns(20, start=2)]  # would cross 10 and 20
    response = _post_batch(client, auth, session["id"], batch)
    assert response.status_code == 422, response.json
    fields = [f["field"] for f in response.json["error"]["fields"]]
    assert field in fields
    assert _stored(client, auth, session["id"]) == []
    assert _heartbeats(queue) == []


@pytest.mark.parametrize(
    "body",
    [{"messages": []}, {"messages": _turns(MAX_BATCH_MESSAGES + 1)}, {"messages": "hi"}],
    ids=["empty", "one-too-many", "not-a-list"],
)
def test_a_batch_outside_1_to_1000_messages_is_422_naming_messages(
    client: FlaskClient, auth: dict[str, str], body: dict[str, Any]
) -> None:
    session = new_session(client, auth)
    response = client.post(
        f"/agents-api/sessions/{session['id']}/messages", json=body, headers=auth
    )
    assert response.status_code == 422
    assert response.json["error"]["fields"][0]["field"] == "messages"  # type: ignore[index]
    assert _stored(client, auth, session["id"]) == []


def test_the_batch_limit_holds_in_the_domain_for_every_writer(uow: UnitOfWork) -> None:
    too_many = [NewMessage("user", "x")] * (MAX_BATCH_MESSAGES + 1)
    with pytest.raises(Invalid, match="1 to 1000 messages"):
        post_messages(uow=uow, org_id=uuid.uuid4(), session_id=uuid.uuid4(), messages=too_many)
    with pytest.raises(Invalid, match=r"messages\.0\.role"):
        post_messages(
            uow=uow, org_id=uuid.uuid4(), session_id=uuid.uuid4(), messages=[NewMessage("x", "")]
        )


def test_a_batch_to_another_orgs_session_is_404_and_writes_nothing(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    session = new_session(client, auth)
    response = _post_batch(client, other_auth, session["id"], _turns(3))
    assert response.status_code == 404
    assert _stored(client, auth, session["id"]) == []


@pytest.mark.parametrize("form", ["single", "batch"])
def test_context_true_answers_with_the_next_turns_context_holding_what_was_just_stored(
    client: FlaskClient, auth: dict[str, str], form: str
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "earlier question")
    url = f"/agents-api/sessions/{session['id']}/messages?context=true"
    last = {"role": "user", "content": "which database did we pick?"}
    body = last if form == "single" else {"messages": [last]}
    response = client.post(url, json=body, headers=auth)
    assert response.status_code == 201
    posted = response.json
    assert posted is not None
    context = posted["context"]
    # The same document GET …/context answers, after this post.
    fetched = client.get(f"/agents-api/sessions/{session['id']}/context", headers=auth).json
    assert context == fetched
    contents = [m["content"] for m in context["messages"]]
    assert contents[-2:] == ["earlier question", "which database did we pick?"]
    without = client.post(url.removesuffix("?context=true"), json=body, headers=auth).json
    assert without is not None and "context" not in without


def test_r4_concurrent_batches_to_one_session_never_interleave(
    settings: Settings, committed_factory: sessionmaker[Session]
) -> None:
    """The session lock serializes writers: each batch's messages are consecutive."""
    from web.app import create_app

    app = create_app(settings, queue=RecordingQueue(), session_factory=committed_factory)
    auth = {"Authorization": f"Bearer {new_key(committed_factory)}"}
    sid = new_session(app.test_client(), auth)["id"]
    writers, batches, size = 4, 5, 20
    failures: list[str] = []

    def write(writer: int) -> None:
        client = app.test_client()
        for b in range(batches):
            batch = [{"role": "user", "content": f"w{writer} b{b} m{m}"} for m in range(size)]
            response = _post_batch(client, auth, sid, batch)
            if response.status_code != 201:
                failures.append(f"{response.status_code} {response.json}")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    with committed_factory() as db:
        contents = db.scalars(
            select(Message.content).where(Message.session_id == uuid.UUID(sid)).order_by(Message.id)
        ).all()
        assert (
            db.scalar(
                select(func.count())
                .select_from(Message)
                .where(Message.session_id == uuid.UUID(sid))
            )
            == writers * batches * size
        )
    runs = [contents[i : i + size] for i in range(0, len(contents), size)]
    for run in runs:
        prefix = run[0].rsplit(" ", 1)[0]  # "w<writer> b<batch>"
        assert [c.rsplit(" ", 1)[0] for c in run] == [prefix] * size
        assert [c.rsplit(" ", 1)[1] for c in run] == [f"m{m}" for m in range(size)]


def test_a_topic_opened_after_a_post_in_the_same_transaction_is_summarized(
    uow: UnitOfWork, queue: RecordingQueue, api_key: str
) -> None:
    """The post writes with Core statements; ORM objects read before it must not hide it."""
    from shared.infra.queue import SUMMARIZE_TOPIC
    from shared.sessions.service import active_topic, open_topic

    with uow:
        org_id = org_for_key(uow=uow, key=api_key)
        assert org_id is not None

        session = create_session(uow=uow, org_id=org_id, agent_id="a", user_id="u").session
        first = active_topic(uow=uow, session_id=session.id)  # now in the identity map
        post_messages(
            uow=uow, org_id=org_id, session_id=session.id, messages=[NewMessage("user", "hello")]
        )
        open_topic(uow=uow, org_id=org_id, session_id=session.id, title=None)
        uow.commit()  # the jobs go out after the commit
        assert [job.kwargs["topic_id"] for job in queue.sent if job.task == SUMMARIZE_TOPIC] == [
            str(first.id)
        ]


def _wait_for_a_lock_wait(factory: sessionmaker[Session]) -> None:
    """Until a backend of this database waits for a lock (the post, behind the holder)."""
    deadline = time.monotonic() + 30
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    while time.monotonic() < deadline:
        with factory() as db:
            if db.scalar(waiting):
                return
        time.sleep(0.01)
    raise AssertionError("the post never waited for the session's lock")


@pytest.mark.parametrize("one_statement", [False, True], ids=["in-a-transaction", "autocommit"])
def test_r6_a_post_that_waited_for_the_session_lock_lands_in_the_topic_opened_meanwhile(
    committed_factory: sessionmaker[Session], one_statement: bool
) -> None:
    """The post is one call of `append_messages` (posting.py), which takes the lock and
    then reads the active topic: the read must see the topic as the writer it waited for
    left it, not as it was when the call started. A writer that held the lock and opened
    a new topic wins, in a transaction and as a statement of its own (the HTTP post)."""
    org_id, sid = committed_session(committed_factory)
    holder = UnitOfWork(committed_factory, RecordingQueue())
    with holder:
        opened = open_topic(uow=holder, org_id=org_id, session_id=sid, title="next")  # locks
        posted: list[PostedMessages] = []

        def post() -> None:
            with UnitOfWork(committed_factory, RecordingQueue()) as uow:
                if one_statement:
                    uow.one_statement()
                posted.append(
                    post_messages(
                        uow=uow, org_id=org_id, session_id=sid, messages=[NewMessage("user", "hi")]
                    )
                )
                uow.commit()

        writer = threading.Thread(target=post)
        writer.start()
        _wait_for_a_lock_wait(committed_factory)
        holder.commit()
    writer.join(timeout=30)

    assert [m.topic_id for m in posted[0].messages] == [opened.id]
