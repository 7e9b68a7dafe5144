"""The context stack through HTTP: order (R1), bounded window and cost (R2), stable bytes (R3)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import Engine, event, text

from shared.infra.queue import INVALIDATE_MEMORY, RecordingQueue
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from tests.helpers import new_session, post_message


def context(client: FlaskClient, auth: dict[str, str], sid: str) -> Any:
    response = client.get(f"/agents-api/sessions/{sid}/context", headers=auth)
    assert response.status_code == 200, response.json
    return response.json


def run_invalidations(queue: RecordingQueue, redis_url: str) -> None:
    """What the `fast` worker does with the invalidation jobs a request enqueued."""
    cache = MemoryCache(redis.Redis.from_url(redis_url))
    for job in queue.sent:
        if job.task == INVALIDATE_MEMORY:
            cache.invalidate(Scope.from_job_kwargs(**job.kwargs))
    queue.sent.clear()


@pytest.fixture
def session(client: FlaskClient, auth: dict[str, str]) -> dict[str, Any]:
    client.put(
        "/agents-api/agents/planner",
        json={"soul": "You are Planner.", "skills": ["sql"], "tools": [{"name": "search"}]},
        headers=auth,
    )
    return new_session(client, auth, agent="planner", user="ada")


def test_r1_the_stack_is_stable_then_semi_stable_then_volatile(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid = session["id"]
    client.put(FACTS_URL, json={"tz": "CET"}, headers=auth)
    post_message(client, auth, sid, "first topic")
    client.post(f"/agents-api/sessions/{sid}/topics", json={"title": "Second"}, headers=auth)
    post_message(client, auth, sid, "hello")
    client.post(
        f"/agents-api/sessions/{sid}/tools/notes",
        json={"arguments": {"op": "$set", "content": "note one"}},
        headers=auth,
    )
    client.put(f"/agents-api/sessions/{sid}/working-memory", json={"step": 3}, headers=auth)
    body = context(client, auth, sid)

    assert list(body["layers"]) == ["stable", "semiStable", "volatile"]
    assert list(body["layers"]["stable"]) == [
        "soul", "skills", "tools", "memory", "durableFacts", "driftResult",
    ]  # fmt: skip
    assert list(body["layers"]["semiStable"]) == ["notes", "priorTopics"]
    assert list(body["layers"]["volatile"]) == ["thread", "toolResults", "workingMemory"]
    tools = [t.get("function", t)["name"] for t in body["layers"]["stable"]["tools"]]
    assert tools == ["notes", "important_info", "manage_topic_memory", "recall", "search"]

    messages = body["messages"]
    stable, semi = messages[0]["content"], messages[1]["content"]
    assert stable.index("You are Planner.") < stable.index("# Tools") < stable.index("tz")
    assert semi.index("note one") < semi.index("- Untitled topic (summary pending)")
    # The notes call and its result: one assistant tool_calls message and one tool message.
    assert [m["role"] for m in messages[2:]] == ["user", "assistant", "tool", "system"]
    assert messages[-1]["content"] == '# Working memory\n{"step":3}'  # rendered last
    assert body["layers"]["volatile"]["workingMemory"] == {"step": 3}
    assert [m["toolName"] for m in body["layers"]["volatile"]["toolResults"]] == ["notes"] * 2
    assert body["tokens"]["total"] == sum(
        body["tokens"][layer] for layer in ("stable", "semiStable", "volatile")
    )


def test_r1_tool_calls_render_as_provider_ready_pairs(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid = session["id"]
    client.post(
        f"/agents-api/sessions/{sid}/tools/important_info",
        json={"arguments": {"op": "read"}, "toolCallId": "call-7"},
        headers=auth,
    )
    call, result = context(client, auth, sid)["messages"][-2:]
    assert call["role"] == "assistant" and call["tool_calls"][0]["id"] == "call-7"
    assert call["tool_calls"][0]["function"] == {
        "name": "important_info", "arguments": '{"op":"read"}',
    }  # fmt: skip
    assert result == {"role": "tool", "tool_call_id": "call-7", "content": result["content"]}


@pytest.mark.parametrize("mode", ["block", "sliding"])
def test_r2_the_thread_holds_at_most_the_window(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any], app: Any, mode: str
) -> None:
    app.extensions["driftless"].settings = app.extensions["driftless"].settings.model_copy(
        update={"window_mode": mode}
    )
    ids = [post_message(client, auth, session["id"], f"m{i}")["id"] for i in range(45)]
    thread = context(client, auth, session["id"])["layers"]["volatile"]["thread"]
    assert [m["id"] for m in thread] == ids[-len(thread) :]  # the newest, in order
    assert len(thread) == (20 if mode == "sliding" else 15)


@pytest.fixture
def statement_counter(engine: Engine) -> Iterator[list[str]]:
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    yield statements
    event.remove(engine, "before_cursor_execute", count)


def test_r2_assembly_cost_does_not_grow_with_the_topic(
    client: FlaskClient,
    auth: dict[str, str],
    session: dict[str, Any],
    connection: Any,
    statement_counter: list[str],
) -> None:
    sid = session["id"]
    post_message(client, auth, sid, "seed")
    context(client, auth, sid)  # warm the memory cache
    statement_counter.clear()
    small = context(client, auth, sid)
    small_statements = len(statement_counter)

    # Grow the topic by 5,000 messages (bulk insert, counters kept as the service keeps them).
    connection.execute(
        text(
            "INSERT INTO messages (session_id, topic_id, role, content)"
            " SELECT :s, :t, 'user', 'bulk ' || g FROM generate_series(1, 5000) g"
        ),
        {"s": sid, "t": session["activeTopicId"]},
    )
    connection.execute(
        text(
            "UPDATE topics SET message_count = message_count + 5000,"
            " last_message_id = (SELECT max(id) FROM messages WHERE topic_id = :t) WHERE id = :t"
        ),
        {"t": session["activeTopicId"]},
    )
    statement_counter.clear()
    large = context(client, auth, sid)
    assert len(statement_counter) == small_statements  # the same fixed set of lookups
    assert all("LIMIT" in s for s in statement_counter if "FROM messages" in s)
    assert len(large["layers"]["volatile"]["thread"]) <= 20 < 5000
    assert large["layers"]["volatile"]["thread"][-1]["content"] == "bulk 5000"
    assert small["stablePrefixHash"] == large["stablePrefixHash"]


FACTS_URL = "/agents-api/facts?agentId=planner&userId=ada"


def test_r3_the_stable_prefix_is_byte_identical_across_50_turns(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid = session["id"]
    client.put(FACTS_URL, json={"b": 2, "a": {"y": 1, "x": [3, 1]}}, headers=auth)
    prefixes = set()
    hashes = set()
    for turn in range(50):
        post_message(client, auth, sid, f"question {turn}")
        post_message(client, auth, sid, f"answer {turn}", role="assistant")
        client.put(f"/agents-api/sessions/{sid}/working-memory", json={"turn": turn}, headers=auth)
        body = context(client, auth, sid)
        prefixes.add(body["messages"][0]["content"])
        hashes.add(body["stablePrefixHash"])
    assert len(prefixes) == 1 and len(hashes) == 1


def test_r3_two_sessions_of_one_scope_share_the_stable_prefix(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    other = new_session(client, auth, agent="planner", user="ada")
    post_message(client, auth, other["id"], "something else entirely")
    assert (
        context(client, auth, session["id"])["messages"][0]
        == context(client, auth, other["id"])["messages"][0]
    )
    stranger = new_session(client, auth, agent="planner", user="bob")
    client.put("/agents-api/facts?agentId=planner&userId=bob", json={"k": 1}, headers=auth)
    assert (
        context(client, auth, stranger["id"])["stablePrefixHash"]
        != context(client, auth, session["id"])["stablePrefixHash"]
    )


def test_r3_a_promotion_changes_the_stable_prefix_exactly_once(
    client: FlaskClient,
    auth: dict[str, str],
    session: dict[str, Any],
    queue: RecordingQueue,
    redis_url: str,
) -> None:
    sid = session["id"]
    earlier = new_session(client, auth, agent="planner", user="ada")
    hashes = []
    for turn in range(10):
        if turn == 5:
            client.put(
                f"/agents-api/topics/{earlier['activeTopicId']}/memory",
                json={"state": "promoted"},
                headers=auth,
            )
            run_invalidations(queue, redis_url)
        post_message(client, auth, sid, f"turn {turn}")
        hashes.append(context(client, auth, sid)["stablePrefixHash"])
    changes = [i for i in range(1, 10) if hashes[i] != hashes[i - 1]]
    assert changes == [5]


def test_working_memory_rejects_non_objects_and_oversized_documents(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    url = f"/agents-api/sessions/{session['id']}/working-memory"
    assert client.put(url, json=[1, 2], headers=auth).status_code == 422
    assert client.put(url, json={"blob": "x" * 20_000}, headers=auth).status_code == 413
    assert context(client, auth, session["id"])["layers"]["volatile"]["workingMemory"] is None


def test_context_of_another_orgs_session_is_404(
    client: FlaskClient, session: dict[str, Any], other_auth: dict[str, str]
) -> None:
    for method, url, body in (
        ("GET", f"/agents-api/sessions/{session['id']}/context", None),
        ("PUT", f"/agents-api/sessions/{session['id']}/working-memory", {"a": 1}),
    ):
        response = client.open(url, method=method, json=body, headers=other_auth)
        assert response.status_code == 404
    assert uuid.UUID(session["id"])
