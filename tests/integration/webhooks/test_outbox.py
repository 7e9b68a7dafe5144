"""The outbox: an event is written in the transaction of the change it reports, one
delivery per subscription of the org that wants its type, and the delivery's job is
sent only after the commit. No subscription, no row; a refused change, no event."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.domain.errors import Invalid
from shared.facts.service import merge_facts
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import DELIVER_WEBHOOK, RecordingQueue
from shared.memory.scope import Scope
from tests.helpers import new_session, post_message
from tests.integration.webhooks.outbox import deliveries_of, events_of

SCOPE = "agentId=agent-1&userId=user-1"


def subscribe(client: FlaskClient, auth: dict[str, str], *events: str) -> str:
    answer: Any = client.post(
        "/agents-api/webhooks", headers=auth, json={"url": "http://127.0.0.1:9/", "events": events}
    )
    assert answer.status_code == 201, answer.json
    return str(answer.json["id"])


def delivery_jobs(queue: RecordingQueue) -> list[int]:
    return [job.kwargs["delivery_id"] for job in queue.sent if job.task == DELIVER_WEBHOOK]


def test_a_facts_change_is_an_event_with_one_delivery_per_subscription_sent_after_commit(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    first = subscribe(client, auth, "facts.changed")
    second = subscribe(client, auth, "facts.changed", "topic.forked")
    subscribe(client, auth, "topic.forked")  # wants another type

    answer = client.put(f"/agents-api/facts?{SCOPE}", headers=auth, json={"plan": "pro"})

    assert answer.status_code == 200
    ((type_, body),) = events_of(session_factory, auth)
    assert type_ == "facts.changed" == body["type"]
    assert body["data"] == {
        "agentId": "agent-1", "userId": "user-1", "set": ["plan"], "unset": [],
        "facts": {"plan": "pro"},
    }  # fmt: skip
    expected = [(first, "pending"), (second, "pending")]
    assert sorted(deliveries_of(session_factory, auth)) == sorted(expected)
    assert len(delivery_jobs(queue)) == 2


def test_an_unset_fact_is_an_event_and_unsetting_a_missing_key_is_none(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    subscribe(client, auth, "facts.changed")
    client.put(f"/agents-api/facts?{SCOPE}", headers=auth, json={"plan": "pro", "tz": "UTC"})

    assert client.delete(f"/agents-api/facts/plan?{SCOPE}", headers=auth).status_code == 204
    assert client.delete(f"/agents-api/facts/nope?{SCOPE}", headers=auth).status_code == 204

    changes = [body["data"] for _, body in events_of(session_factory, auth)]
    assert [(c["set"], c["unset"], c["facts"]) for c in changes] == [
        (["plan", "tz"], [], {"plan": "pro", "tz": "UTC"}),
        ([], ["plan"], {"tz": "UTC"}),
    ]


def test_without_a_subscription_a_change_writes_no_event(
    client: FlaskClient,
    auth: dict[str, str],
    other_auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    subscribe(client, other_auth, "facts.changed")  # another org's subscription

    client.put(f"/agents-api/facts?{SCOPE}", headers=auth, json={"plan": "pro"})

    assert events_of(session_factory, auth) == []
    assert delivery_jobs(queue) == []


def test_a_refused_change_records_no_event(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    subscribe(client, auth, "facts.changed")

    answer = client.put(f"/agents-api/facts?{SCOPE}", headers=auth, json={"big": "x" * 20_000})

    assert answer.status_code == 413
    assert events_of(session_factory, auth) == []
    assert delivery_jobs(queue) == []


def test_a_rolled_back_change_leaves_no_event_and_sends_no_job(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    subscribe(client, auth, "facts.changed")
    org_id = new_session(client, auth)["orgId"]
    sent_before = len(queue.sent)

    with pytest.raises(Invalid), UnitOfWork(session_factory, queue) as uow:
        merge_facts(
            uow=uow,
            scope=Scope(org_id, "agent-1", "user-1"),
            facts={"plan": "pro"},
            changed_by="user",
        )
        raise Invalid("the request failed after the change")  # never committed

    assert events_of(session_factory, auth) == []
    assert len(queue.sent) == sent_before


def test_a_users_curation_is_a_memory_changed_event_naming_the_topic_and_the_states(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    subscribe(client, auth, "topic.memory_changed")
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "Remember that the deploy is on Friday.")
    topic_id = session["activeTopicId"]

    answer = client.put(
        f"/agents-api/topics/{topic_id}/memory", headers=auth, json={"state": "promoted"}
    )
    assert answer.status_code == 200
    client.put(f"/agents-api/topics/{topic_id}/memory", headers=auth, json={"state": "promoted"})

    ((_, body),) = events_of(session_factory, auth)  # the second, unchanged, is no event
    assert body["data"] == {
        "sessionId": session["id"], "topicId": topic_id, "agentId": "agent-1",
        "userId": "user-1", "memoryState": "promoted", "previousMemoryState": "none",
        "actor": "user",
    }  # fmt: skip


def test_erasing_a_user_removes_the_events_about_them_and_their_deliveries(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
) -> None:
    subscribe(client, auth, "facts.changed")
    client.put(f"/agents-api/facts?{SCOPE}", headers=auth, json={"plan": "pro"})
    client.put(
        "/agents-api/facts?agentId=agent-1&userId=user-2", headers=auth, json={"plan": "free"}
    )

    erased = client.delete("/agents-api/agents/agent-1/users/user-1", headers=auth)

    assert erased.status_code == 200, erased.json
    assert [body["data"]["userId"] for _, body in events_of(session_factory, auth)] == ["user-2"]
    assert len(deliveries_of(session_factory, auth)) == 1
