"""Sessions, messages and topics through HTTP, each test inside a rolled-back savepoint."""

from __future__ import annotations

from flask.testing import FlaskClient

from shared.infra.queue import SUMMARIZE_TOPIC, RecordingQueue
from tests.helpers import new_session, post_message


def test_a_new_session_starts_with_one_active_topic(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth, agent="agent-7", user="user-9")
    assert session["agentId"] == "agent-7" and session["userId"] == "user-9"
    body = client.get(f"/agents-api/sessions/{session['id']}", headers=auth).json
    assert body is not None
    assert [t["id"] for t in body["topics"]] == [session["activeTopicId"]]
    assert body["topics"][0]["status"] == "active"
    assert body["topics"][0]["summary"] is None  # R9: no summary at birth


def test_messages_land_in_the_active_topic_with_increasing_ids(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth)
    posted = [
        post_message(client, auth, session["id"], "hi", role="user"),
        post_message(client, auth, session["id"], "hello", role="assistant"),
    ]
    tool = client.post(
        f"/agents-api/sessions/{session['id']}/messages",
        json={"role": "tool", "content": "{}", "toolName": "notes", "toolCallId": "c1"},
        headers=auth,
    )
    assert tool.status_code == 201
    ids = [p["id"] for p in posted] + [tool.json["id"]]  # type: ignore[index]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert {p["topicId"] for p in posted} == {session["activeTopicId"]}
    assert posted[0]["driftEvaluationEnqueued"] is False

    topic = client.get(f"/agents-api/topics/{session['activeTopicId']}", headers=auth).json
    assert topic is not None
    assert topic["messageCount"] == 2  # user + assistant only; tool messages do not count

    listed = client.get(f"/agents-api/sessions/{session['id']}/messages", headers=auth).json
    assert listed is not None
    assert [m["id"] for m in listed["messages"]] == ids
    assert listed["messages"][2]["toolName"] == "notes"


def test_message_listing_pages_with_after_id(client: FlaskClient, auth: dict[str, str]) -> None:
    session = new_session(client, auth)
    ids = [post_message(client, auth, session["id"], f"m{i}")["id"] for i in range(5)]
    url = f"/agents-api/sessions/{session['id']}/messages"
    first = client.get(f"{url}?limit=2", headers=auth).json
    assert first is not None
    assert [m["id"] for m in first["messages"]] == ids[:2]
    rest = client.get(f"{url}?limit=10&afterId={first['nextAfterId']}", headers=auth).json
    assert rest is not None
    assert [m["id"] for m in rest["messages"]] == ids[2:]
    assert rest["nextAfterId"] is None


def test_r25_a_new_topic_closes_the_prior_one_and_enqueues_its_summary(
    client: FlaskClient, auth: dict[str, str], queue: RecordingQueue
) -> None:
    session = new_session(client, auth)
    prior = session["activeTopicId"]
    post_message(client, auth, session["id"], "let's plan the launch")
    response = client.post(
        f"/agents-api/sessions/{session['id']}/topics", json={"title": "Budget"}, headers=auth
    )
    assert response.status_code == 201
    new = response.json
    assert new is not None
    assert new["status"] == "active" and new["title"] == "Budget"

    closed = client.get(f"/agents-api/topics/{prior}", headers=auth).json
    assert closed is not None
    assert closed["status"] == "closed" and closed["closedAt"] is not None
    assert [(j.task, j.kwargs["topic_id"]) for j in queue.sent] == [(SUMMARIZE_TOPIC, prior)]

    follow_up = post_message(client, auth, session["id"], "new subject")
    assert follow_up["topicId"] == new["id"]
    listed = client.get(
        f"/agents-api/sessions/{session['id']}/messages?topicId={prior}", headers=auth
    ).json
    assert listed is not None
    assert [m["content"] for m in listed["messages"]] == ["let's plan the launch"]


def test_a_new_topic_with_no_body_is_untitled(client: FlaskClient, auth: dict[str, str]) -> None:
    session = new_session(client, auth)
    response = client.post(f"/agents-api/sessions/{session['id']}/topics", headers=auth)
    assert response.status_code == 201
    assert response.json["title"] is None  # type: ignore[index]


def test_closing_an_empty_topic_enqueues_nothing(
    client: FlaskClient, auth: dict[str, str], queue: RecordingQueue
) -> None:
    session = new_session(client, auth)
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    assert queue.sent == []


def test_agent_profiles_round_trip(client: FlaskClient, auth: dict[str, str]) -> None:
    profile = {"soul": "You are terse.", "skills": ["sql"], "tools": [{"name": "search"}]}
    put = client.put("/agents-api/agents/planner", json=profile, headers=auth)
    assert put.status_code == 200
    assert client.get("/agents-api/agents/planner", headers=auth).json == {
        "agentId": "planner",
        **profile,
    }
    replaced = client.put("/agents-api/agents/planner", json={"soul": "v2"}, headers=auth).json
    assert replaced == {"agentId": "planner", "soul": "v2", "skills": [], "tools": []}


def test_an_unknown_agent_is_404(client: FlaskClient, auth: dict[str, str]) -> None:
    response = client.get("/agents-api/agents/nobody", headers=auth)
    assert response.status_code == 404
    assert response.json["error"]["code"] == "not_found"  # type: ignore[index]
