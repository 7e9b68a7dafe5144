"""A message's `name`, who spoke ([4.3]): stored by a post or a batch, answered by GET,
rendered into the context as OpenAI's `name`, found by search by its words; a bad name is
a 422 naming `name` that writes nothing, whichever way the messages come."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from shared.domain.errors import Invalid
from shared.domain.limits import MAX_MESSAGE_NAME_CHARS
from shared.infra.db.uow import UnitOfWork
from shared.sessions.posting import NewMessage, post_messages
from tests.helpers import new_session

SCOPE = {"agentId": "agent-1", "userId": "user-1"}


def _post(client: FlaskClient, auth: dict[str, str], sid: str, body: dict[str, Any]) -> Any:
    return client.post(f"/agents-api/sessions/{sid}/messages", json=body, headers=auth)


def _stored(client: FlaskClient, auth: dict[str, str], sid: str) -> list[dict[str, Any]]:
    answer = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth)
    assert answer.status_code == 200, answer.json
    messages: list[dict[str, Any]] = answer.json["messages"]  # type: ignore[index]
    return messages


def test_a_name_posted_alone_or_in_a_batch_is_stored_and_answered_by_get_43(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    sid = new_session(client, auth)["id"]
    alone = _post(client, auth, sid, {"role": "user", "name": "Caroline", "content": "Hi!"})
    assert alone.status_code == 201, alone.json
    batch = {
        "messages": [
            {"role": "assistant", "name": "Mel-2_x", "content": "Hello."},
            {"role": "user", "content": "No name here."},
        ]
    }
    assert _post(client, auth, sid, batch).status_code == 201
    stored = _stored(client, auth, sid)
    assert [(m["role"], m["name"], m["content"]) for m in stored] == [
        ("user", "Caroline", "Hi!"),
        ("assistant", "Mel-2_x", "Hello."),
        ("user", None, "No name here."),
    ]


def test_the_context_renders_each_speakers_name_as_openais_name_43(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    sid = new_session(client, auth)["id"]
    turns = [
        {"role": "user", "name": "Caroline", "content": "I went to a support group."},
        {"role": "assistant", "content": "How was it?"},
    ]
    posted = client.post(
        f"/agents-api/sessions/{sid}/messages?context=true",
        json={"messages": turns},
        headers=auth,
    )
    assert posted.status_code == 201, posted.json
    read = client.get(f"/agents-api/sessions/{sid}/context", headers=auth).json
    for context in (posted.json["context"], read):  # type: ignore[index]
        thread = [m for m in context["messages"] if m["role"] != "system"]
        assert thread == [
            {"role": "user", "name": "Caroline", "content": "I went to a support group."},
            {"role": "assistant", "content": "How was it?"},  # no name: no key at all
        ]
        layer = context["layers"]["volatile"]["thread"]
        assert [m["name"] for m in layer] == ["Caroline", None]


def test_search_finds_what_a_speaker_said_by_the_speakers_name_43(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    sid = new_session(client, auth)["id"]
    turns = [
        {"role": "user", "name": "Caroline", "content": "I researched adoption agencies."},
        {"role": "assistant", "name": "Melanie", "content": "I painted a sunrise."},
        {"role": "user", "name": "Caroline", "content": "The counselling course starts soon."},
    ]
    assert _post(client, auth, sid, {"messages": turns}).status_code == 201
    found = client.get(
        "/agents-api/search",
        headers=auth,
        query_string={**SCOPE, "q": "What did Caroline do?", "kind": "message"},
    )
    assert found.status_code == 200, found.json
    snippets = {hit["snippet"] for hit in found.json["results"]}  # type: ignore[index]
    # Neither text holds "Caroline": the name alone found them, and not Melanie's.
    assert snippets == {"I researched adoption agencies.", "The counselling course starts soon."}


BAD_NAMES = [
    "",
    "Anne Marie",  # a space
    "José",  # not ASCII: OpenAI's rule refuses it, so an agent's provider may
    "x" * (MAX_MESSAGE_NAME_CHARS + 1),
    "Caroline\n",
    "<|im_start|>",
    42,
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_a_bad_name_is_422_naming_name_and_writes_nothing_43(
    client: FlaskClient, auth: dict[str, str], name: Any
) -> None:
    sid = new_session(client, auth)["id"]
    alone = _post(client, auth, sid, {"role": "user", "name": name, "content": "hi"})
    assert alone.status_code == 422, alone.json
    assert [f["field"] for f in alone.json["error"]["fields"]] == ["name"]  # type: ignore[index]
    good = {"role": "user", "name": "Caroline", "content": "fine"}
    bad = {"role": "assistant", "name": name, "content": "hi"}
    batch = _post(client, auth, sid, {"messages": [good, bad]})
    assert batch.status_code == 422, batch.json
    assert [f["field"] for f in batch.json["error"]["fields"]] == ["messages.1.name"]  # type: ignore[index]
    assert _stored(client, auth, sid) == []


def test_a_tool_message_carries_no_speakers_name_43(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    sid = new_session(client, auth)["id"]
    tool = {"role": "tool", "name": "Caroline", "content": "{}", "toolName": "notes"}
    answer = _post(client, auth, sid, {"messages": [{"role": "user", "content": "hi"}, tool]})
    assert answer.status_code == 422, answer.json
    message = answer.json["error"]["message"]  # type: ignore[index]
    assert message.startswith("messages.1.name: only user and assistant messages")
    assert _stored(client, auth, sid) == []


def test_every_writer_of_messages_gets_the_domains_name_check_43(uow: UnitOfWork) -> None:
    """Import and tools post through the domain too: the check is there, before any write."""
    for name, role in (("a b", "user"), ("Caroline", "tool")):
        with pytest.raises(Invalid, match=r"^messages\.0\.name: "):
            post_messages(
                uow=uow, org_id=uuid.uuid4(), session_id=uuid.uuid4(),
                messages=[NewMessage(role, "x", name=name)],
            )  # fmt: skip


def test_a_caller_of_the_post_without_names_still_posts_43(
    client: FlaskClient, auth: dict[str, str], uow: UnitOfWork
) -> None:
    """A web process deployed before migration 0023 calls append_messages with 8 arguments."""
    session = new_session(client, auth)
    with uow:
        posted, stored = _post_unnamed(uow, session)
    assert [r.message_count for r in posted] == [2, 2]
    assert [tuple(r) for r in stored] == [("user", "one", None), ("assistant", "two", None)]


def _post_unnamed(uow: UnitOfWork, session: dict[str, Any]) -> tuple[Any, Any]:
    posted = uow.session.execute(
        text(
            "SELECT id, message_count FROM append_messages(CAST(:s AS uuid), CAST(:o AS uuid),"
            " ARRAY['user', 'assistant'], ARRAY['one', 'two'], ARRAY[NULL, NULL]::text[],"
            " ARRAY[NULL, NULL]::text[], 2, 0)"
        ),
        {"s": session["id"], "o": session["orgId"]},
    ).all()
    stored = uow.session.execute(
        text("SELECT role, content, name FROM messages WHERE session_id = :s ORDER BY id"),
        {"s": session["id"]},
    ).all()
    return posted, stored
