"""A retried tool call (R7, R8): its toolCallId answers the stored result, the tool runs once.

An agent runtime retries a call whose answer it lost (a timeout, a dropped connection)
with the same toolCallId. Running it again would append the note twice, or apply a
curation twice; storing it again would put two results under one id in the thread.
"""

from __future__ import annotations

import threading
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import RecordingQueue
from tests.conftest import new_key
from tests.helpers import new_session

NOTE = {"op": "$set", "content": "decided: PostgreSQL for billing"}


def call(client: FlaskClient, auth: dict[str, str], sid: str, body: dict[str, Any]) -> Any:
    return client.post(f"/agents-api/sessions/{sid}/tools/notes", json=body, headers=auth)


def notes_content(client: FlaskClient, auth: dict[str, str], sid: str) -> str:
    response = call(client, auth, sid, {"arguments": {"op": "read"}})
    content: str = response.json["result"]["content"]  # type: ignore[index]
    return content


def tool_messages(client: FlaskClient, auth: dict[str, str], sid: str, call_id: str) -> list[Any]:
    body: Any = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth).json
    return [m for m in body["messages"] if m["toolCallId"] == call_id]


def test_r7_a_retried_tool_call_answers_the_stored_result_and_runs_once(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    sid = new_session(client, auth)["id"]
    first = call(client, auth, sid, {"arguments": NOTE, "toolCallId": "call-1"})
    retry = call(client, auth, sid, {"arguments": NOTE, "toolCallId": "call-1"})
    assert first.status_code == retry.status_code == 200
    assert retry.json == first.json and first.json["ok"] is True  # type: ignore[index]
    assert notes_content(client, auth, sid).count(NOTE["content"]) == 1
    assert len(tool_messages(client, auth, sid, "call-1")) == 2  # the call and its result
    # A new id is a new call: it runs.
    call(client, auth, sid, {"arguments": NOTE, "toolCallId": "call-2"})
    assert notes_content(client, auth, sid).count(NOTE["content"]) == 2


def test_r7_a_retried_refusal_answers_the_same_refusal(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    sid = new_session(client, auth)["id"]
    call(client, auth, sid, {"arguments": {"op": "$set", "content": "x" * 15_000}})
    too_long = {"op": "$set", "content": "y" * 6_000}  # the notes would pass MAX_NOTES_CHARS
    first = call(client, auth, sid, {"arguments": too_long, "toolCallId": "call-1"})
    retry = call(client, auth, sid, {"arguments": too_long, "toolCallId": "call-1"})
    assert first.json["ok"] is False and retry.json == first.json  # type: ignore[index]
    assert len(tool_messages(client, auth, sid, "call-1")) == 2


def test_r7_a_toolcallid_reused_for_another_call_is_a_conflict(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    sid = new_session(client, auth)["id"]
    call(client, auth, sid, {"arguments": NOTE, "toolCallId": "call-1"})
    other = {"op": "$set", "content": "decided: Redis as the broker"}
    response = call(client, auth, sid, {"arguments": other, "toolCallId": "call-1"})
    assert response.status_code == 409
    assert "call-1" in response.json["error"]["message"]  # type: ignore[index]
    assert other["content"] not in notes_content(client, auth, sid)
    assert len(tool_messages(client, auth, sid, "call-1")) == 2


def test_r7_the_same_toolcallid_in_another_session_is_another_call(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    first, second = new_session(client, auth)["id"], new_session(client, auth)["id"]
    for sid in (first, second):
        assert call(client, auth, sid, {"arguments": NOTE, "toolCallId": "call-1"}).json["ok"]
        assert notes_content(client, auth, sid).count(NOTE["content"]) == 1


def test_r7_concurrent_retries_of_one_call_run_it_once(
    settings: Settings, committed_factory: sessionmaker[Session]
) -> None:
    from web.app import create_app

    app = create_app(settings, queue=RecordingQueue(), session_factory=committed_factory)
    auth = {"Authorization": f"Bearer {new_key(committed_factory)}"}
    sid = new_session(app.test_client(), auth)["id"]
    answers: list[Any] = []
    start = threading.Barrier(4)

    def retry() -> None:
        client = app.test_client()
        start.wait()
        response = call(client, auth, sid, {"arguments": NOTE, "toolCallId": "call-1"})
        answers.append((response.status_code, response.json))

    threads = [threading.Thread(target=retry) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client = app.test_client()
    assert len(answers) == 4 and all(answer == answers[0] for answer in answers)
    assert answers[0][0] == 200
    assert notes_content(client, auth, sid).count(NOTE["content"]) == 1
    assert len(tool_messages(client, auth, sid, "call-1")) == 2


def test_r7_a_posted_call_and_its_result_share_their_id_and_take_it(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    """POST …/messages stores a runtime's own (MCP) tool messages as given: a call and its
    result carry one id, as the built-in tools store theirs. A built-in call under an id
    the session already used for those is not a retry of them: a conflict, nothing runs."""
    sid = new_session(client, auth)["id"]
    posted = [
        {
            "role": "tool",
            "content": '{"call": "weather"}',
            "toolName": "weather",
            "toolCallId": "c1",
        },
        {"role": "tool", "content": '{"sunny": true}', "toolName": "weather", "toolCallId": "c1"},
    ]
    response = client.post(
        f"/agents-api/sessions/{sid}/messages", json={"messages": posted}, headers=auth
    )
    assert response.status_code == 201, response.json
    assert len(tool_messages(client, auth, sid, "c1")) == 2
    assert call(client, auth, sid, {"arguments": NOTE, "toolCallId": "c1"}).status_code == 409
    assert NOTE["content"] not in notes_content(client, auth, sid)
