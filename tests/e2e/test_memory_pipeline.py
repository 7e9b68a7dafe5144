"""Promotion, memory and demotion end to end: HTTP, commit, broker, worker, cache."""

from __future__ import annotations

from typing import Any

from tests.helpers import new_session, post_message, wait_for

DECISIONS = [
    "Let's settle the storage for the billing service.",
    "Options are PostgreSQL or MongoDB.",
    "We decided to use PostgreSQL because invoices need transactions.",
    "Agreed, PostgreSQL with Alembic migrations.",
    "I prefer Celery with Redis for retries; never cron on web hosts.",
    "Noted: Celery on Redis, no cron on the web hosts.",
]


def _memory(client: Any, auth: dict[str, str], user: str) -> list[str]:
    body = client.get(f"/agents-api/memory?agentId=planner&userId={user}", headers=auth).json
    return [entry["topicId"] for entry in body["entries"]]


def test_r15_promote_shows_in_memory_and_a_user_demotion_removes_it(
    live_app: Any, live_auth: dict[str, str]
) -> None:
    client = live_app.test_client()
    session = new_session(client, live_auth, agent="planner", user="grace")
    tid = session["activeTopicId"]
    assert _memory(client, live_auth, "grace") == []  # the empty block is now cached

    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=live_auth)
    wait_for(lambda: _memory(client, live_auth, "grace") == [tid], what="the promotion in memory")

    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "none"}, headers=live_auth)
    wait_for(lambda: _memory(client, live_auth, "grace") == [], what="the demotion in memory")


def test_r11_a_topic_the_worker_promotes_reaches_the_next_session(
    live_app: Any, live_auth: dict[str, str]
) -> None:
    client = live_app.test_client()
    first = new_session(client, live_auth, agent="planner", user="linus")
    for i, content in enumerate(DECISIONS):
        post_message(
            client, live_auth, first["id"], content, role="user" if i % 2 == 0 else "assistant"
        )
    client.post(f"/agents-api/sessions/{first['id']}/topics", headers=live_auth)

    def promoted() -> Any:
        topic = client.get(f"/agents-api/topics/{first['activeTopicId']}", headers=live_auth).json
        return topic if topic["summarizedAt"] else None

    topic = wait_for(promoted, what="the worker's summary")
    assert topic["summarySource"] == "llm" and topic["keepInMemory"] is True
    new_session(client, live_auth, agent="planner", user="linus")
    assert _memory(client, live_auth, "linus") == [first["activeTopicId"]]
