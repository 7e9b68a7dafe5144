"""Recall: GET /agents-api/search over a scope's topics and messages, across its sessions.

Strictly inside org + agent + user; deprecated topics (R18) and their messages left out
unless asked for; erasure and retention take what they remove out of search too; no
query a client can send answers 500."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text, update
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.retention.service import purge_session
from shared.search import ranking
from shared.topics.models import Topic
from tests.helpers import new_session, post_message

SCOPE = {"agentId": "agent-1", "userId": "user-1"}


def search(client: FlaskClient, auth: dict[str, str], q: str, **params: Any) -> Any:
    answer = client.get(
        "/agents-api/search", headers=auth, query_string={**SCOPE, "q": q, **params}
    )
    assert answer.status_code == 200, answer.json
    return answer.json["results"]  # type: ignore[index]


def talk(client: FlaskClient, auth: dict[str, str], *lines: str, user: str = "user-1") -> Any:
    session = new_session(client, auth, user=user)
    for i, line in enumerate(lines):
        post_message(client, auth, session["id"], line, role="user" if i % 2 == 0 else "assistant")
    return session


def test_a_word_said_in_an_earlier_session_is_found_with_its_topic_and_session(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    earlier = talk(client, auth, "My sister's wedding is in Lisbon in June.", "Lovely city!")
    talk(client, auth, "Let us plan the sprint.", "Sure.")

    (hit,) = search(client, auth, "Where is the wedding?")

    assert hit["kind"] == "message" and "Lisbon" in hit["snippet"]
    assert (hit["sessionId"], hit["topicId"]) == (earlier["id"], earlier["activeTopicId"])
    assert hit["memoryState"] == "none" and isinstance(hit["messageId"], int)
    assert "<b>" not in hit["snippet"]  # plain text, for models and people


def test_another_users_or_another_orgs_words_are_never_found(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    talk(client, auth, "The launch code is ZEBRA-42.", user="user-2")  # same org, other user
    talk(client, other_auth, "The launch code is ZEBRA-42.")  # other org, same ids
    other_agent = new_session(client, auth, agent="agent-2", user="user-1")
    post_message(client, auth, other_agent["id"], "The launch code is ZEBRA-42.")

    assert search(client, auth, "launch code zebra") == []
    mine = talk(client, auth, "Mine: the launch code is ZEBRA-42.")
    assert [h["sessionId"] for h in search(client, auth, "launch code zebra")] == [mine["id"]]


def test_a_deprecated_topic_and_its_messages_are_left_out_unless_asked_for(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = talk(client, auth, "We chose MongoDB for the orders service.", "Noted.")
    topic = session["activeTopicId"]
    answer = client.put(
        f"/agents-api/topics/{topic}/memory", headers=auth, json={"state": "deprecated"}
    )
    assert answer.status_code == 200

    assert search(client, auth, "MongoDB orders") == []
    found = search(client, auth, "MongoDB orders", includeDeprecated="true")
    assert {h["topicId"] for h in found} == {topic}
    assert {h["memoryState"] for h in found} == {"deprecated"}


def test_topics_are_found_by_title_and_summary_and_kind_narrows_the_results(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    session = talk(client, auth, "Which database?", "PostgreSQL, with read replicas.")
    with session_factory() as db:
        db.execute(
            update(Topic)
            .where(Topic.id == session["activeTopicId"])
            .values(title="Database choice", summary="PostgreSQL with replicas was chosen.")
        )
        db.commit()

    both = search(client, auth, "database replicas")
    topics = search(client, auth, "database replicas", kind="topic")
    messages = search(client, auth, "database replicas", kind="message")

    assert {h["kind"] for h in both} == {"topic", "message"}
    assert [(h["kind"], h["messageId"], h["title"]) for h in topics] == [
        ("topic", None, "Database choice")
    ]
    assert {h["kind"] for h in messages} == {"message"}
    scores = [h["score"] for h in both]
    assert scores == sorted(scores, reverse=True)  # best first


def test_the_turns_around_a_message_lift_it_above_the_same_words_said_in_passing(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    in_passing = talk(client, auth, "I fed the cat.", "The budget is due.", "And the dog?")
    in_context = talk(
        client, auth, "Budget review on Monday.", "The budget is due.", "Which budget line?"
    )

    results = search(client, auth, "budget due", kind="message")
    said = [h for h in results if h["snippet"] == "The budget is due."]

    assert [h["sessionId"] for h in said] == [in_context["id"], in_passing["id"]]
    assert said[0]["score"] > said[1]["score"]


def test_a_rare_word_of_the_query_outweighs_a_word_said_all_the_time(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    # Said first, so a ranking that weighed both words alike would put it last of the
    # one-word matches (ties go to the latest).
    lisbon = talk(client, auth, "We flew to Lisbon on Friday.")
    for _ in range(5):
        talk(client, auth, "Coffee with the team this morning.")

    first, *rest = search(client, auth, "coffee in Lisbon", kind="message")

    assert first["sessionId"] == lisbon["id"]
    assert len(rest) == 5 and first["score"] > 2 * rest[0]["score"]


def test_a_topic_title_and_a_message_with_the_same_word_rank_on_one_scale(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    titled = talk(client, auth, "Let us talk about it.", "Sure.")
    said = talk(client, auth, "The kayak is in the garage.")
    with session_factory() as db:
        db.execute(update(Topic).where(Topic.id == titled["activeTopicId"]).values(title="Kayak"))
        db.commit()

    hits = search(client, auth, "kayak")

    assert {(h["kind"], h["sessionId"]) for h in hits} == {
        ("topic", titled["id"]),
        ("message", said["id"]),
    }
    # A title is not worth ten messages (its label weighs as a message's text does).
    topic, message = sorted(hits, key=lambda h: h["kind"], reverse=True)
    assert topic["score"] < 2 * message["score"] and message["score"] < 2 * topic["score"]


def test_in_a_large_scope_common_words_only_add_to_the_scores_of_rarer_words_matches(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The statistics decide what is common. Other tests' rows share the table, so the
    # shares here are small: every word the statistics list counts as common.
    monkeypatch.setattr(ranking, "COMMON_MATCHES", 0)
    talk(client, auth, *["Coffee again, as every day."] * 10)
    talk(client, auth, *["Trip plans and coffee."] * 14)
    both = talk(client, auth, "Coffee in Lisbon was the best.")
    lisbon = talk(client, auth, "Lisbon trip: the tickets are booked.")
    with session_factory() as db:  # coffee is in 25 of 26 messages, trip in 15, Lisbon 2
        db.execute(text("ANALYZE messages"))
        db.commit()

    found = search(client, auth, "coffee Lisbon", kind="message", limit="50")
    only_common = search(client, auth, "coffee trip", kind="message", limit="50")

    # Only the rarer word's matches are candidates (Lisbon: unlisted, or the rarest), and
    # the common word lifts the one that has both.
    assert [h["sessionId"] for h in found] == [both["id"], lisbon["id"]]
    # When every word is common, the rarest finds the candidates.
    assert len(only_common) == 15 and all("rip" in h["snippet"] for h in only_common)


def test_erasing_the_user_takes_their_words_out_of_search(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    talk(client, auth, "My passport number is X1234567.")
    assert search(client, auth, "passport number")

    erased = client.delete("/agents-api/agents/agent-1/users/user-1", headers=auth)

    assert erased.status_code == 200
    assert search(client, auth, "passport number") == []


def test_retention_takes_purged_messages_out_of_search_and_keeps_the_summary_found(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    session = talk(client, auth, "The vendor contract renews in March.", "Noted.")
    with session_factory() as db:  # summarized, so retention may purge its messages
        db.execute(
            update(Topic)
            .where(Topic.id == session["activeTopicId"])
            .values(
                title="Vendor contract", summary="Renews in March.",
                summarized_through_id=Topic.last_message_id,
            )
        )  # fmt: skip
        db.commit()

    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
        purged = purge_session(uow=uow, session_id=uuid.UUID(session["id"]), idle_before=later)
        uow.commit()

    assert purged.messages == 2
    assert search(client, auth, "vendor contract", kind="message") == []
    assert [h["title"] for h in search(client, auth, "vendor contract")] == ["Vendor contract"]


@pytest.mark.parametrize(
    "q",
    [
        "the and of to",  # only stop-words
        "'; DROP TABLE messages; --",
        "foo & bar | !baz <-> (qux:*",  # tsquery syntax
        'budget OR "release" -cat',  # websearch syntax
        "\\\\ %% _ [] {}",
        "ünïcödé 日本語 😀",
    ],
)
def test_any_query_text_is_an_answer_never_a_500(
    client: FlaskClient, auth: dict[str, str], q: str
) -> None:
    talk(client, auth, "The release budget is fine.")
    assert isinstance(search(client, auth, q), list)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"q": ""}, "q"),
        ({"q": "   "}, "q"),
        ({"q": "x" * 10_000}, "q"),
        ({"q": "a\x00b"}, "q"),
        ({"q": "x", "limit": "0"}, "limit"),
        ({"q": "x", "limit": "51"}, "limit"),
        ({"q": "x", "limit": "ten"}, "limit"),
        ({"q": "x", "kind": "fact"}, "kind"),
        ({"q": "x", "includeDeprecated": "maybe"}, "includeDeprecated"),
        ({"q": "x", "agentId": ""}, "agentId"),
    ],
)
def test_bad_queries_are_422_naming_the_field(
    client: FlaskClient, auth: dict[str, str], params: dict[str, str], field: str
) -> None:
    answer = client.get("/agents-api/search", headers=auth, query_string={**SCOPE, **params})
    assert answer.status_code == 422, answer.json
    assert field in answer.json["error"]["message"]  # type: ignore[index]


def test_a_query_without_a_scope_is_422(client: FlaskClient, auth: dict[str, str]) -> None:
    answer = client.get("/agents-api/search?q=budget", headers=auth)
    assert answer.status_code == 422
