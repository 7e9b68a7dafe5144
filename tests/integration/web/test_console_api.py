"""What the console needs beyond the contract: scopes, session lists, notes, live events."""

from __future__ import annotations

from typing import Any

import redis
from flask.testing import FlaskClient

from shared.infra.live import publish
from shared.infra.queue import FIRE_DEBOUNCE, RecordingQueue
from tests.helpers import new_session, post_message


def test_scopes_and_sessions_are_listed_newest_first(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    first = new_session(client, auth, agent="planner", user="ada")
    second = new_session(client, auth, agent="planner", user="ada")
    new_session(client, auth, agent="planner", user="bob")
    new_session(client, other_auth, agent="planner", user="ada")  # another org's
    scopes: Any = client.get("/agents-api/scopes", headers=auth).json
    assert sorted((s["agentId"], s["userId"], s["sessions"]) for s in scopes["scopes"]) == [
        ("planner", "ada", 2), ("planner", "bob", 1),
    ]  # fmt: skip
    listed: Any = client.get("/agents-api/sessions?agentId=planner&userId=ada", headers=auth).json
    assert [s["id"] for s in listed["sessions"]] == [second["id"], first["id"]]
    assert listed["sessions"][0]["activeTopicId"] == second["activeTopicId"]


def test_topic_notes_show_the_active_and_the_archived_documents(
    client: FlaskClient, auth: dict[str, str], connection: Any
) -> None:
    from sqlalchemy import text

    session = new_session(client, auth)
    tid = session["activeTopicId"]
    client.post(
        f"/agents-api/sessions/{session['id']}/tools/notes",
        json={"arguments": {"op": "$set", "content": "draft one"}},
        headers=auth,
    )
    connection.execute(
        text("UPDATE notes SET status = 'archived', archived_at = now() WHERE topic_id = :t"),
        {"t": tid},
    )
    client.post(
        f"/agents-api/sessions/{session['id']}/tools/notes",
        json={"arguments": {"op": "$set", "content": "draft two"}},
        headers=auth,
    )
    notes: Any = client.get(f"/agents-api/topics/{tid}/notes", headers=auth).json
    assert notes["active"]["content"] == "draft two"
    assert [a["content"] for a in notes["archived"]] == ["draft one"]


def test_curation_shows_who_set_the_state_last(client: FlaskClient, auth: dict[str, str]) -> None:
    session = new_session(client, auth)
    tid = session["activeTopicId"]
    assert client.get(f"/agents-api/topics/{tid}", headers=auth).json["memoryStateSetBy"] is None  # type: ignore[index]
    client.post(
        f"/agents-api/sessions/{session['id']}/tools/manage_topic_memory",
        json={"arguments": {"action": "promote", "topicId": tid}},
        headers=auth,
    )
    assert client.get(f"/agents-api/topics/{tid}", headers=auth).json["memoryStateSetBy"] == "agent"  # type: ignore[index]
    client.post(f"/agents-api/topics/{tid}/memory/cycle", headers=auth)
    assert client.get(f"/agents-api/topics/{tid}", headers=auth).json["memoryStateSetBy"] == "user"  # type: ignore[index]


def test_r27_live_events_stream_and_their_end_is_the_disconnect_trigger(
    client: FlaskClient, auth: dict[str, str], redis_url: str, queue: RecordingQueue
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "hello")
    response = client.get(
        f"/agents-api/sessions/{session['id']}/events", headers=auth, buffered=False
    )
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    chunks = response.response  # the generator, consumed like a server would
    assert next(chunks).decode() == "event: ready\ndata: {}\n\n"  # type: ignore[call-overload]
    publish(redis.Redis.from_url(redis_url), session["id"], "fork", session["activeTopicId"])
    event = next(chunks).decode()  # type: ignore[call-overload]
    assert event.startswith("event: session\n")
    assert f'"topicId": "{session["activeTopicId"]}"' in event and '"type": "fork"' in event
    response.close()  # the browser went away
    fire = [job for job in queue.sent if job.task == FIRE_DEBOUNCE]
    assert [job.kwargs["trigger"] for job in fire] == ["disconnect"]


def test_the_console_page_is_served_for_its_routes(client: FlaskClient) -> None:
    for url in ("/console", "/console/sessions/0b8e2a53-0000-4000-8000-000000000000"):
        response = client.get(url)
        assert response.status_code == 200
        assert response.mimetype == "text/html"
        assert b"/console/static/console.js" in response.data
        response.close()  # send_from_directory streams the file


def test_the_root_leads_to_the_console_without_a_key_43(client: FlaskClient) -> None:
    """The start banner prints the bare URL: opening it must reach the console, not a 404."""
    response = client.get("/")
    assert response.status_code == 302
    assert response.headers["Location"] == "/console"
    page = client.get("/", follow_redirects=True)
    assert page.status_code == 200 and page.mimetype == "text/html"
    page.close()  # send_from_directory streams the file
