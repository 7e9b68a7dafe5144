"""POST /agents-api/import?format=openai-chat: chat histories become sessions whose one
closed topic is summarized in the bulk lane, after the commit."""

from __future__ import annotations

import json
from typing import Any

from flask.testing import FlaskClient

from shared.infra.queue import SUMMARIZE_TOPIC, RecordingQueue

QUERY = "?format=openai-chat&agentId=planner&userId=ada"
HISTORY = [
    {"role": "system", "content": "You are a planner."},
    {"role": "user", "content": "Which database for the ledger?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "ledger"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "PostgreSQL 15"},
    {"role": "assistant", "content": [{"type": "text", "text": "PostgreSQL."}]},
]


def _import(client: FlaskClient, auth: dict[str, str], histories: list[Any]) -> Any:
    data = "\n".join(json.dumps(h) for h in histories).encode()
    return client.post(f"/agents-api/import{QUERY}", data=data, headers=auth)


def test_chat_histories_become_sessions_summarized_in_the_bulk_lane(
    client: FlaskClient, auth: dict[str, str], org: str, queue: RecordingQueue
) -> None:
    other = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    response = _import(client, auth, [HISTORY, other])
    assert response.status_code == 200, response.json
    assert response.json["imported"]["sessions"] == 2
    assert response.json["imported"]["messages"] == 6
    sessions: Any = client.get("/agents-api/sessions?agentId=planner&userId=ada", headers=auth).json
    assert len(sessions["sessions"]) == 2
    jobs = [j for j in queue.sent if j.task == SUMMARIZE_TOPIC]
    assert len(jobs) == 2 and {j.lane for j in jobs} == {"bulk"} and {j.org for j in jobs} == {org}
    topic: Any = client.get(f"/agents-api/topics/{jobs[0].kwargs['topic_id']}", headers=auth).json
    assert topic["status"] == "closed" and topic["summary"] is None
    view: Any = client.get(f"/agents-api/sessions/{topic['sessionId']}", headers=auth).json
    assert view["activeTopicId"] not in (None, topic["id"])
    messages: Any = client.get(
        f"/agents-api/sessions/{topic['sessionId']}/messages", headers=auth
    ).json
    rows = [(m["role"], m["content"]) for m in messages["messages"]]
    if len(rows) == 4:  # the first history: system skipped, the call stored as a tool message
        assert rows == [
            ("user", "Which database for the ledger?"), ("tool", '{"q": "ledger"}'),
            ("tool", "PostgreSQL 15"), ("assistant", "PostgreSQL."),
        ]  # fmt: skip
    # Again: the same histories are found, nothing is written or sent.
    sent = len(queue.sent)
    again = _import(client, auth, [HISTORY, other])
    assert again.json["imported"]["skippedSessions"] == 2
    assert len(queue.sent) == sent


def test_a_bad_history_names_its_line_and_the_agent_and_user_are_required(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    response = _import(client, auth, [HISTORY, [{"role": "wizard", "content": "x"}]])
    assert response.status_code == 422
    assert response.json["error"]["message"].startswith("line 2: [0].role")
    assert "1 session(s)" in response.json["error"]["message"]
    unscoped = client.post("/agents-api/import?format=openai-chat", data=b"[]", headers=auth)
    assert unscoped.status_code == 422
