"""`driftless_client.Client` against the real system (gunicorn web, Celery worker,
PostgreSQL, Redis): every operation the server serves, its answers as the API's dicts,
error answers as `ApiError`, and opaque ids sent and read back exactly.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from driftless_client import ApiError, Client
from driftless_client._api import Operations
from driftless_client._calls import API_PREFIX, Call, events_call, export_call
from tests.client.conftest import System
from tests.faults.procs import wait_until
from tests.helpers import wait_for
from tests.webhook_receiver import Receiver

# Ids are opaque: a path or a query must carry them without bending.
ODD_ID = "a:{b} c/é"
ODD_USER = "ü {x}:y?z#w&v=1%20 +"


@pytest.fixture
def client(system: System, org_key: str) -> Iterator[Client]:
    with Client(system.base_url, org_key) as client:
        yield client


def test_a_turn_posts_one_message_a_batch_and_gets_the_context_back(client: Client) -> None:
    session = client.create_session("support-bot", "user-1")
    assert session["agentId"] == "support-bot"
    assert session["userId"] == "user-1"
    sid, topic_id = session["id"], session["activeTopicId"]

    one = client.post_messages(sid, {"role": "user", "content": "My invoice is wrong."})
    assert one["topicId"] == topic_id
    assert one["driftEvaluationEnqueued"] is False
    assert "context" not in one

    batch = client.post_messages(
        sid,
        [
            {"role": "assistant", "content": "Which invoice?"},
            {"role": "user", "content": "The one from March."},
        ],
    )
    assert [m["topicId"] for m in batch["messages"]] == [topic_id, topic_id]
    assert one["id"] < batch["messages"][0]["id"] < batch["messages"][1]["id"]

    turn = client.post_messages(
        sid, [{"role": "assistant", "content": "Found it: March, 42 EUR."}], context=True
    )
    context = turn["context"]
    assert set(context) >= {"layers", "messages", "tokens", "stablePrefixHash"}
    assert context["messages"][-1]["content"] == "Found it: March, 42 EUR."
    assert client.context(sid)["messages"] == context["messages"]

    listed = client.messages(sid)
    assert [m["content"] for m in listed["messages"]] == [
        "My invoice is wrong.",
        "Which invoice?",
        "The one from March.",
        "Found it: March, 42 EUR.",
    ]
    first_page = client.messages(sid, limit=3)
    rest = client.messages(sid, after_id=first_page["nextAfterId"])
    assert first_page["messages"] + rest["messages"] == listed["messages"]
    assert client.messages(sid, topic_id=topic_id)["messages"] == listed["messages"]


def test_a_speakers_name_is_posted_read_back_and_rendered_into_the_context_43(
    client: Client,
) -> None:
    sid = client.create_session("group-bot", "room-7")["id"]
    client.post_messages(sid, {"role": "user", "name": "Caroline", "content": "Hi all."})
    turn = client.post_messages(
        sid, [{"role": "assistant", "name": "helper", "content": "Hello."}], context=True
    )
    thread = [m for m in turn["context"]["messages"] if m["role"] != "system"]
    assert [m["name"] for m in thread] == ["Caroline", "helper"]
    assert [m["name"] for m in client.messages(sid)["messages"]] == ["Caroline", "helper"]
    with pytest.raises(ApiError) as refused:
        client.post_messages(sid, {"role": "user", "name": "Anne Marie", "content": "x"})
    assert refused.value.status == 422
    assert [f["field"] for f in (refused.value.details or {})["fields"]] == ["name"]
    assert len(client.messages(sid)["messages"]) == 2


def test_topics_are_listed_with_the_session_and_curated_into_the_scopes_memory(
    client: Client, system: System
) -> None:
    session = client.create_session("support-bot", "user-2")
    sid, first = session["id"], session["activeTopicId"]
    client.post_messages(sid, {"role": "user", "content": "I prefer email over phone."})

    second = client.create_topic(sid, title="Billing")
    assert second["title"] == "Billing"
    assert second["status"] == "active"
    topics = client.session(sid)["topics"]
    assert [t["id"] for t in topics] == [first, second["id"]]
    assert topics[0]["status"] == "closed"
    assert client.topic(first)["id"] == first

    promoted = client.set_memory_state(first, "promoted")
    assert promoted["memoryState"] == "promoted"

    def remembered() -> bool:  # the worker invalidates a cached memory block (eventually)
        memory = client.memory("support-bot", "user-2")
        return [e["topicId"] for e in memory["entries"]] == [first]

    wait_until(remembered, timeout=30, what=system.logs, interval=0.1)

    cycled = client.cycle_memory_state(first)
    assert cycled["memoryState"] != "promoted"
    changes = client.memory_history(first)["changes"]  # the summarizer may add its own
    by_user = sorted((c["id"], c["toState"]) for c in changes if c["actor"] == "user")
    assert [state for _, state in by_user] == ["promoted", cycled["memoryState"]]


def test_facts_are_merged_read_and_deleted(client: Client) -> None:
    merged = client.merge_facts("support-bot", "user-3", {"plan": "pro", "seats": 3})
    assert merged == {"facts": {"plan": "pro", "seats": 3}}
    client.merge_facts("support-bot", "user-3", {"seats": 5})
    assert client.facts("support-bot", "user-3") == {"facts": {"plan": "pro", "seats": 5}}
    assert client.delete_fact("support-bot", "user-3", "plan") is None
    assert client.facts("support-bot", "user-3") == {"facts": {"seats": 5}}
    seats = client.facts_history("support-bot", "user-3", "seats")["history"]
    assert [(v["value"], v["changedBy"]) for v in seats] == [(5, "user"), (3, "user")]
    assert seats[0]["validTo"] is None and seats[1]["validTo"] == seats[0]["validFrom"]
    page = client.facts_history("support-bot", "user-3", "seats", limit=1)
    assert page["history"] == seats[:1]
    rest = client.facts_history("support-bot", "user-3", "seats", before=page["nextBefore"])
    assert rest["history"] == seats[1:]
    plan = client.facts_history("support-bot", "user-3", "plan")["history"]
    assert plan[0]["removedBy"] == "user"


def test_an_exit_trigger_is_scheduled_and_the_worker_evaluates_the_topic(
    client: Client, system: System
) -> None:
    session = client.create_session("support-bot", "user-4")
    sid, topic_id = session["id"], session["activeTopicId"]
    client.post_messages(
        sid,
        [
            {"role": "user", "content": "How do I reset my password?"},
            {"role": "assistant", "content": "Use the link on the login page."},
        ],
    )
    assert client.evaluate(sid, "manual") == {"status": "scheduled"}

    def evaluated() -> list[dict[str, object]]:
        found: list[dict[str, object]] = client.evaluations(topic_id)["evaluations"]
        return found

    wait_until(evaluated, timeout=60, what=system.logs, interval=0.2)
    assert evaluated()[0]["trigger"] == "manual"


def test_the_orgs_usage_counts_the_llm_calls_the_worker_made_for_it(
    client: Client, system: System
) -> None:
    assert client.usage()["llmCalls"] == 0  # a new org
    session = client.create_session("support-bot", "user-9")
    sid, topic_id = session["id"], session["activeTopicId"]
    client.post_messages(sid, [{"role": "user", "content": "Ship the invoices on Friday."}])
    assert client.evaluate(sid, "manual") == {"status": "scheduled"}

    def evaluated() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = client.evaluations(topic_id)["evaluations"]
        return found

    wait_until(evaluated, timeout=60, what=system.logs, interval=0.2)
    [evaluation] = evaluated()
    usage = client.usage()
    # Every call the evaluation made (drift, then the summary) is in the org's usage, under
    # the offline provider's model; the audit row says what they cost.
    assert usage["llmCalls"] == evaluation["llmCalls"] == 2
    assert usage["byModel"] == {
        "local-extractive-v1": {
            "llmCalls": 2,
            "promptTokens": evaluation["promptTokens"],
            "completionTokens": evaluation["completionTokens"],
        }
    }
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    assert client.usage(since=later)["llmCalls"] == 0
    assert client.usage(since="2000-01-01T00:00:00+02:00")["llmCalls"] == 2
    with pytest.raises(ApiError) as raised:
        client.usage(since="2026-01-01T00:00:00")  # no timezone: which moment?
    assert (raised.value.status, raised.value.code) == (422, "validation_error")
    assert raised.value.message.startswith("since: ")
    # No budget by default: the fleet's limits, this month's tokens, never exhausted.
    limits = client.limits()
    assert (limits["llmRpm"], limits["monthlyTokens"], limits["budgetExhausted"]) == (0, 0, False)
    assert limits["tokensUsed"] == usage["promptTokens"] + usage["completionTokens"]
    assert limits["month"] == dt.datetime.now(dt.UTC).strftime("%Y-%m")


def test_a_reevaluation_is_started_read_listed_and_cancelled(client: Client) -> None:
    sid = client.create_session("support-bot", "user-10")["id"]
    client.post_messages(sid, {"role": "user", "content": "Ship the invoices on Friday."})
    since = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)

    started = client.start_reevaluation(agent_id="support-bot", since=since, rate=0.5)

    assert (started["state"], started["total"]) == ("running", 1)  # no beat here: it waits
    shown = client.reevaluation(started["id"])
    assert (shown["agentId"], shown["userId"], shown["rate"]) == ("support-bot", None, 0.5)
    assert dt.datetime.fromisoformat(shown["since"]) == since
    assert [c["id"] for c in client.reevaluations()["reevaluations"]] == [started["id"]]
    assert client.cancel_reevaluation(started["id"])["state"] == "cancelled"
    nothing = client.start_reevaluation(user_id="nobody")
    assert nothing["state"] == "finished"
    with pytest.raises(ApiError) as raised:
        client.cancel_reevaluation(nothing["id"])
    assert (raised.value.status, raised.value.code) == (409, "conflict")
    with pytest.raises(ApiError) as raised:
        client.start_reevaluation(rate=0)
    assert (raised.value.status, raised.value.message[:5]) == (422, "rate:")


def test_search_finds_an_earlier_sessions_words_in_the_scope(client: Client) -> None:
    earlier = client.create_session("agent-1", "ada")
    client.post_messages(earlier["id"], [{"role": "user", "content": "Flights land at 9pm."}])
    client.create_session("agent-1", "ada")

    found = client.search("agent-1", "ada", "when do flights land", limit=3, kind="message")

    assert [hit["sessionId"] for hit in found["results"]] == [earlier["id"]]
    assert client.search("agent-1", "bob", "flights")["results"] == []


def test_a_search_text_of_the_documented_length_is_searched_41(client: Client) -> None:
    """1,000 CJK characters, percent-encoded, pass any request line a server takes: the
    client sends such a search by POST."""
    earlier = client.create_session("agent-1", "ada")
    client.post_messages(earlier["id"], [{"role": "user", "content": "Flights land at 9pm."}])

    q = "when do flights land " + "記" * 979
    found = client.search("agent-1", "ada", q, include_deprecated=True)

    assert [hit["sessionId"] for hit in found["results"]] == [earlier["id"]]
    assert _Recorder().search("a", "u", "記" * 1000).method == "POST"
    assert _Recorder().search("a", "u", "flights").method == "GET"


def test_a_webhook_receives_a_facts_change_signed_and_is_deleted(client: Client) -> None:
    with Receiver() as receiver:
        webhook = client.create_webhook(receiver.url + "/hook", ["facts.changed"])
        receiver.secret = webhook["secret"]
        client.merge_facts("agent-1", "ada", {"plan": "pro"})

        def delivered() -> list[Any] | None:
            deliveries = client.webhook_deliveries(webhook["id"])["deliveries"]
            return deliveries if [d["status"] for d in deliveries] == ["delivered"] else None

        (delivery,) = wait_for(delivered, timeout=30, what="the worker to deliver the event")
        (event,) = receiver.events().values()

    assert event["data"]["facts"] == {"plan": "pro"}  # verified with the secret shown once
    assert receiver.requests[0].headers["webhook-id"] == delivery["eventId"]
    assert [w["id"] for w in client.webhooks()["webhooks"]] == [webhook["id"]]
    assert client.delete_webhook(webhook["id"]) is None
    assert client.webhooks() == {"webhooks": []}


def test_the_agent_profile_tools_notes_and_working_memory(client: Client) -> None:
    agent = client.put_agent("support-bot", soul="You are terse.", skills=["billing"])
    assert client.agent("support-bot") == agent
    assert agent["soul"] == "You are terse."

    names = {t["function"]["name"] for t in client.tools()["tools"]}
    assert {"notes", "important_info", "manage_topic_memory"} <= names

    session = client.create_session("support-bot", "user-5")
    sid, topic_id = session["id"], session["activeTopicId"]
    result = client.call_tool(
        sid, "notes", {"op": "$set", "content": "wants a refund"}, tool_call_id="call-1"
    )
    assert result["ok"] is True
    assert result["toolCallId"] == "call-1"
    notes = client.notes(topic_id)
    assert "wants a refund" in str(notes["active"])

    assert client.set_working_memory(sid, {"step": 2}) == {"workingMemory": {"step": 2}}
    assert client.context(sid)["layers"]["volatile"]["workingMemory"] == {"step": 2}
    assert client.context(sid)["layers"]["stable"]["soul"] == "You are terse."


def test_the_scopes_sessions_are_listed_and_erased(client: Client) -> None:
    sid = client.create_session("support-bot", "user-6")["id"]
    assert [s["id"] for s in client.sessions("support-bot", "user-6")["sessions"]] == [sid]
    assert [(s["agentId"], s["userId"]) for s in client.scopes()["scopes"]] == [
        ("support-bot", "user-6")
    ]

    erased = client.erase_user("support-bot", "user-6")
    assert erased["erased"]["sessions"] == 1
    with pytest.raises(ApiError) as error:
        client.session(sid)
    assert error.value.status == 404


def test_an_odd_agent_id_round_trips_exactly_in_bodies_and_queries(client: Client) -> None:
    session = client.create_session(ODD_ID, ODD_USER)
    assert (session["agentId"], session["userId"]) == (ODD_ID, ODD_USER)
    assert [s["id"] for s in client.sessions(ODD_ID, ODD_USER)["sessions"]] == [session["id"]]
    assert client.sessions(ODD_ID, ODD_USER + " ")["sessions"] == []  # not another scope
    client.set_memory_state(session["activeTopicId"], "promoted")
    memory = client.memory(ODD_ID, ODD_USER)  # nothing cached yet: read from PostgreSQL
    assert [e["topicId"] for e in memory["entries"]] == [session["activeTopicId"]]
    client.merge_facts(ODD_ID, ODD_USER, {"k/é {1}": "v"})
    assert client.facts(ODD_ID, ODD_USER) == {"facts": {"k/é {1}": "v"}}


def test_odd_ids_round_trip_exactly_in_path_segments(client: Client) -> None:
    agent = "a:{b} c?é#%25&+"  # everything of ODD_ID but `/` (next test), and more
    assert client.put_agent(agent, soul="odd")["agentId"] == agent
    assert client.agent(agent)["soul"] == "odd"
    client.merge_facts(agent, ODD_USER, {"k {1}?#%": "v", "other": 1})
    client.delete_fact(agent, ODD_USER, "k {1}?#%")
    assert client.facts(agent, ODD_USER) == {"facts": {"other": 1}}
    client.create_session(agent, ODD_USER)
    assert client.erase_user(agent, ODD_USER)["erased"]["sessions"] == 1


def test_an_id_holding_a_slash_reaches_its_path_route(client: Client) -> None:
    # gunicorn decodes %2F before routing; web/paths.py routes from the target as sent.
    assert client.put_agent(ODD_ID, soul="odd")["agentId"] == ODD_ID
    assert client.agent(ODD_ID)["agentId"] == ODD_ID
    client.merge_facts(ODD_ID, "u/1", {"a/b": 1, "a%2Fb": 2, "c": 3})
    client.delete_fact(ODD_ID, "u/1", "a/b")
    client.delete_fact(ODD_ID, "u/1", "a%2Fb")
    assert client.facts(ODD_ID, "u/1") == {"facts": {"c": 3}}
    client.create_session(ODD_ID, "u/1")
    assert client.erase_user(ODD_ID, "u/1")["erased"]["sessions"] == 1


def test_an_unknown_session_is_an_api_error_404_not_found(client: Client) -> None:
    with pytest.raises(ApiError) as error:
        client.post_messages(str(uuid.uuid4()), {"role": "user", "content": "hello?"})
    assert (error.value.status, error.value.code) == (404, "not_found")
    assert error.value.message


def test_an_invalid_body_is_an_api_error_422_naming_the_field(client: Client) -> None:
    sid = client.create_session("support-bot", "user-7")["id"]
    with pytest.raises(ApiError) as error:
        client.post_messages(sid, [{"role": "robot", "content": "beep"}])
    assert (error.value.status, error.value.code) == (422, "validation_error")
    assert "messages.0.role" in error.value.message
    assert error.value.details["fields"][0]["field"] == "messages.0.role"


def test_a_bad_key_is_an_api_error_401(system: System) -> None:
    with Client(system.base_url, "not-a-key") as client, pytest.raises(ApiError) as error:
        client.scopes()
    assert error.value.status == 401


def test_the_session_events_stream_starts_with_ready_and_closes_with_the_iterator(
    client: Client,
) -> None:
    sid = client.create_session("support-bot", "user-8")["id"]
    with contextlib.closing(client.events(sid)) as events:
        assert next(events) == {"event": "ready", "data": {}}


def test_a_scopes_export_streams_as_dicts_header_first(client: Client) -> None:
    sid = client.create_session("export-bot", ODD_USER)["id"]
    client.post_messages(sid, {"role": "user", "content": "Remember the blue door."})
    client.merge_facts("export-bot", ODD_USER, {"door": "blue"})
    with contextlib.closing(client.export("export-bot", ODD_USER)) as lines:
        exported = list(lines)
    assert exported[0]["type"] == "header" and exported[0]["version"] == 1
    assert exported[0]["scope"] == {"agentId": "export-bot", "userId": ODD_USER}
    assert [line["id"] for line in exported if line["type"] == "session"] == [sid]
    said = [line["content"] for line in exported if line["type"] == "message"]
    assert said == ["Remember the blue door."]
    assert [(f["key"], f["value"]) for f in exported if f["type"] == "fact"] == [("door", "blue")]
    # Another agent of the org: the header only.
    assert [line["type"] for line in client.export("no-such-bot")] == ["header"]


def test_an_export_imports_once_and_a_chat_history_file_becomes_a_session(
    client: Client, tmp_path: Path
) -> None:
    sid = client.create_session("import-bot", ODD_USER)["id"]
    client.post_messages(sid, {"role": "user", "content": "Paint the door red."})
    exported = list(client.export("import-bot", ODD_USER))
    # Into the same org it is a copy under new ids; the second time nothing is new.
    assert client.import_(exported)["imported"]["sessions"] == 1
    assert client.import_(exported)["imported"]["skippedSessions"] == 1
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps([{"role": "user", "content": "Which door?"}]) + "\n")
    imported = client.import_file(
        history, format="openai-chat", agent_id="import-bot", user_id=ODD_USER
    )
    assert imported["imported"] == {
        "sessions": 1, "skippedSessions": 0, "topics": 1, "messages": 1, "agents": 0, "facts": 0,
    }  # fmt: skip
    assert len(client.sessions("import-bot", ODD_USER)["sessions"]) == 3
    with pytest.raises(ApiError) as refused:
        client.import_('{"type": "header", "version": 9}')
    assert refused.value.status == 422 and "line 1" in refused.value.message


class _Recorder(Operations[Call, Call]):
    """The operations, answering the request each would send."""

    def _call(self, call: Call) -> Call:
        return call

    def _call_no_content(self, call: Call) -> Call:
        return call


def test_the_client_has_one_method_for_every_operation_of_the_openapi_document(
    client: Client,
) -> None:
    # Ids spelled as the document's path parameters, so that each path reads as its template.
    r = _Recorder()
    sid, tid = "{sid}", "{tid}"
    calls = {
        "put_agent": r.put_agent("{agent_id}"),
        "agent": r.agent("{agent_id}"),
        "erase_user": r.erase_user("{agent_id}", "{user_id}"),
        "create_session": r.create_session("a", "u"),
        "sessions": r.sessions("a", "u"),
        "scopes": r.scopes(),
        "session": r.session(sid),
        "post_messages": r.post_messages(sid, []),
        "messages": r.messages(sid),
        "create_topic": r.create_topic(sid),
        "evaluate": r.evaluate(sid, "manual"),
        "events": events_call(sid),
        "export": export_call("a", "u"),
        "import_": r.import_(b""),
        "import_file": r.import_file(__file__),  # any file: only its request is built
        "context": r.context(sid),
        "set_working_memory": r.set_working_memory(sid, {}),
        "tools": r.tools(),
        "call_tool": r.call_tool(sid, "{name}", {}),
        "topic": r.topic(tid),
        "notes": r.notes(tid),
        "set_memory_state": r.set_memory_state(tid, "none"),
        "cycle_memory_state": r.cycle_memory_state(tid),
        "memory_history": r.memory_history(tid),
        "evaluations": r.evaluations(tid),
        "memory": r.memory("a", "u"),
        "facts": r.facts("a", "u"),
        "merge_facts": r.merge_facts("a", "u", {}),
        "delete_fact": r.delete_fact("a", "u", "{key}"),
        "facts_history": r.facts_history("a", "u", "k"),
        "usage": r.usage(),
        "limits": r.limits(),
        "search": r.search("a", "u", "q"),
        "start_reevaluation": r.start_reevaluation(),
        "reevaluations": r.reevaluations(),
        "reevaluation": r.reevaluation("{reevaluation_id}"),
        "cancel_reevaluation": r.cancel_reevaluation("{reevaluation_id}"),
        "create_webhook": r.create_webhook("http://8.8.8.8/", ["facts.changed"]),
        "webhooks": r.webhooks(),
        "delete_webhook": r.delete_webhook("{webhook_id}"),
        "webhook_deliveries": r.webhook_deliveries("{webhook_id}"),
        "set_provider": r.set_provider("sk-probe", "probe-model"),
        "provider": r.provider(),
        "delete_provider": r.delete_provider(),
        "openapi": r.openapi(),
    }
    public = {name for name in dir(Client) if not name.startswith("_")} - {"close"}
    assert set(calls) == public  # a new method is listed here, and so checked below

    document = client.openapi()["paths"]
    served = {
        (method.upper(), path)
        for path, operations in document.items()
        if path.startswith(API_PREFIX)
        for method in operations
    }
    long_search = r.search("a", "u", "記" * 1000)  # POST /search: a long q's own operation
    called = {(c.method, API_PREFIX + unquote(c.path)) for c in [*calls.values(), long_search]}
    assert called - {("GET", API_PREFIX + "/openapi.json")} == served
