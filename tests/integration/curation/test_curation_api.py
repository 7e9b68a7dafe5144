"""User curation through HTTP (R17, R20, R21), its audit trail and cache invalidation (R15)."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from shared.infra.queue import INVALIDATE_MEMORY, RecordingQueue
from tests.helpers import new_session


def _topic(client: FlaskClient, auth: dict[str, str]) -> str:
    topic_id: str = new_session(client, auth)["activeTopicId"]
    return topic_id


def test_r17_cycle_walks_the_three_states_and_sets_the_users_flags(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    tid = _topic(client, auth)
    states = []
    for _ in range(3):
        response = client.post(f"/agents-api/topics/{tid}/memory/cycle", headers=auth)
        assert response.status_code == 200
        body: Any = response.json
        states.append((body["memoryState"], body["keepInMemory"], body["deprecated"]))
    assert states == [
        ("promoted", True, False),
        ("deprecated", False, True),
        ("none", False, False),
    ]
    assert body["keepInMemoryManuallySet"] and body["deprecatedManuallySet"]


def test_r15_every_flag_change_enqueues_an_invalidation_and_no_change_does_not(
    client: FlaskClient, auth: dict[str, str], queue: RecordingQueue
) -> None:
    tid = _topic(client, auth)
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth)
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth)
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "deprecated"}, headers=auth)
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "none"}, headers=auth)
    invalidations = [job for job in queue.sent if job.task == INVALIDATE_MEMORY]
    assert len(invalidations) == 3
    assert invalidations[0].kwargs == {
        "org_id": invalidations[0].kwargs["org_id"],
        "agent_id": "agent-1",
        "user_id": "user-1",
    }


def test_history_records_who_what_from_and_to(client: FlaskClient, auth: dict[str, str]) -> None:
    tid = _topic(client, auth)
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth)
    client.post(f"/agents-api/topics/{tid}/memory/cycle", headers=auth)
    history: Any = client.get(f"/agents-api/topics/{tid}/history", headers=auth).json
    rows = [(c["actor"], c["action"], c["fromState"], c["toState"]) for c in history["changes"]]
    assert rows == [
        ("user", "set_state", "none", "promoted"),
        ("user", "cycle", "promoted", "deprecated"),
    ]
    assert all(c["createdAt"] for c in history["changes"])


def test_bad_memory_states_are_422(client: FlaskClient, auth: dict[str, str]) -> None:
    tid = _topic(client, auth)
    for body in ({"state": "forgotten"}, {}, {"state": None}):
        response = client.put(f"/agents-api/topics/{tid}/memory", json=body, headers=auth)
        assert response.status_code == 422
        assert "state" in response.json["error"]["message"]  # type: ignore[index]


def test_another_orgs_topic_cannot_be_curated(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    tid = _topic(client, auth)
    for method, url, body in (
        ("PUT", f"/agents-api/topics/{tid}/memory", {"state": "promoted"}),
        ("POST", f"/agents-api/topics/{tid}/memory/cycle", None),
        ("GET", f"/agents-api/topics/{tid}/history", None),
        ("GET", f"/agents-api/topics/{tid}/evaluations", None),
    ):
        response = client.open(url, method=method, json=body, headers=other_auth)
        assert response.status_code == 404, (method, url)
    topic: Any = client.get(f"/agents-api/topics/{tid}", headers=auth).json
    assert topic["memoryState"] == "none"


def test_r21_after_the_users_promoted_the_agents_deprecate_is_refused_through_the_tool(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    """[2.1] item 8: the agent's `deprecate` used to succeed after the user's `promoted`."""
    session = new_session(client, auth)
    tid = session["activeTopicId"]
    put = client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth)
    assert put.json["deprecatedManuallySet"] is True  # type: ignore[index]
    for action, sentence in (
        ("deprecate", "deprecation was set manually by the user; the agent cannot override it."),
        ("demote", "keepInMemory was set manually by the user; the agent cannot override it."),
    ):
        answer: Any = client.post(
            f"/agents-api/sessions/{session['id']}/tools/manage_topic_memory",
            json={"arguments": {"action": action, "topicId": tid}},
            headers=auth,
        ).json
        assert (answer["ok"], answer["error"]) == (False, sentence)
    topic: Any = client.get(f"/agents-api/topics/{tid}", headers=auth).json
    assert topic["memoryState"] == "promoted"
