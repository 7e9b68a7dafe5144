"""The MCP server: the built-in tools and the context stack over MCP, on the HTTP API's services.

Most tests talk to the server in process through the SDK's own client, on the
test's savepoint; one spawns `driftless mcp` over real stdio and one serves it over
real streamable HTTP, both on committed data.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
import uvicorn
from flask.testing import FlaskClient
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import create_api_key, org_for_key
from shared.bootstrap import Runtime
from shared.curation.rules import KEEP_SET_BY_USER
from shared.infra.config import Settings
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import INVALIDATE_MEMORY, RecordingQueue
from shared.sessions.service import create_session
from shared.tools.definitions import BUILT_IN_TOOLS
from tests.helpers import new_session, post_message, wait_for
from web.mcp.server import build_server, http_app

T = TypeVar("T")


def run(with_client: Callable[[Client], Awaitable[T]], server: Any) -> T:
    """Connect the SDK's client to `server` (a Server, stdio parameters or a transport)."""

    async def main() -> T:
        async with Client(server) as client:
            return await with_client(client)

    return anyio.run(main)


def call(server: Server[Any], name: str, arguments: dict[str, Any]) -> CallToolResult:
    return run(lambda client: client.call_tool(name, arguments), server)


def payload(result: CallToolResult) -> Any:
    """The JSON a result carries, checked to be the same in its text and structured forms."""
    [content] = result.content
    assert content.type == "text"
    body = json.loads(content.text)
    assert body == result.structured_content
    return body


def rt_over(settings: Settings, factory: sessionmaker[Session], queue: Any) -> Runtime:
    return Runtime(settings, session_factory=factory, queue=queue)


@pytest.fixture
def mcp_runtime(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue
) -> Runtime:
    return rt_over(settings, session_factory, queue)


@pytest.fixture
def server(mcp_runtime: Runtime, api_key: str) -> Server[Any]:
    return build_server(mcp_runtime, api_key=api_key)


@pytest.fixture
def session(client: FlaskClient, auth: dict[str, str]) -> dict[str, Any]:
    return new_session(client, auth)


def tool_messages(connection: Connection, session_id: str) -> list[Any]:
    return list(
        connection.execute(
            text(
                "SELECT topic_id, tool_name, tool_call_id, content FROM messages"
                " WHERE session_id = :s AND role = 'tool' ORDER BY id"
            ),
            {"s": session_id},
        )
    )


# --- the tool list ---------------------------------------------------------------------


def test_r8_lists_the_four_built_in_tools_and_get_context_with_the_contract_schemas(
    server: Server[Any], client: FlaskClient, auth: dict[str, str]
) -> None:
    tools = run(lambda c: c.list_tools(), server).tools
    assert [t.name for t in tools] == [
        "notes",
        "important_info",
        "manage_topic_memory",
        "recall",
        "get_context",
    ]
    # What the model is told over HTTP (GET /tools) is what MCP advertises, plus sessionId.
    advertised: Any = client.get("/agents-api/tools", headers=auth).json
    assert [d["function"] for d in advertised["tools"]] == [d["function"] for d in BUILT_IN_TOOLS]
    for tool, definition in zip(tools, advertised["tools"], strict=False):
        function = definition["function"]
        schema = dict(tool.input_schema)
        assert tool.description == function["description"]
        assert schema["properties"].pop("sessionId")["type"] == "string"
        assert schema["required"] == ["sessionId", *function["parameters"]["required"]]
        assert schema["properties"] == function["parameters"]["properties"]
        assert schema["additionalProperties"] is False
    context_tool = tools[4]
    assert context_tool.input_schema["required"] == ["sessionId"]
    assert context_tool.annotations is not None and context_tool.annotations.read_only_hint


# --- the built-in tools, stored in the thread (R7) -------------------------------------


def test_r7_notes_over_mcp_are_stored_in_the_thread_like_the_http_tool(
    server: Server[Any],
    client: FlaskClient,
    auth: dict[str, str],
    session: dict[str, Any],
    connection: Connection,
) -> None:
    sid = session["id"]
    post_message(client, auth, sid, "let's pick a database")
    written = call(server, "notes", {"sessionId": sid, "op": "$set", "content": "chose Postgres"})
    assert not written.is_error
    body = payload(written)
    assert body["ok"] is True and body["result"]["content"] == "chose Postgres"

    read = payload(call(server, "notes", {"sessionId": sid, "op": "read"}))
    assert read["result"] == {
        "topicId": session["activeTopicId"],
        "content": "chose Postgres",
        "archived": False,
    }

    rows = tool_messages(connection, sid)
    assert [(str(r.topic_id), r.tool_name) for r in rows] == [
        (session["activeTopicId"], "notes")
    ] * 4
    # Each call is a pair sharing one call id: the call (without sessionId), then its result.
    assert rows[0].tool_call_id == rows[1].tool_call_id == body["toolCallId"]
    assert json.loads(rows[0].content) == {
        "call": {"name": "notes", "arguments": {"op": "$set", "content": "chose Postgres"}}
    }
    assert json.loads(rows[1].content)["ok"] is True
    # The HTTP API sees the same thread.
    messages: Any = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth).json
    assert [m["role"] for m in messages["messages"]] == ["user", "tool", "tool", "tool", "tool"]


def test_r22_important_info_over_mcp_is_the_scopes_facts_document(
    server: Server[Any], client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid = session["id"]
    arguments = {"sessionId": sid, "op": "$set", "key": "tz", "value": {"name": "CET"}}
    assert payload(call(server, "important_info", arguments))["ok"] is True
    facts: Any = client.get("/agents-api/facts?agentId=agent-1&userId=user-1", headers=auth).json
    assert facts == {"facts": {"tz": {"name": "CET"}}}

    call(server, "important_info", {"sessionId": sid, "op": "$unset", "key": "tz"})
    missing = call(server, "important_info", {"sessionId": sid, "op": "read", "key": "tz"})
    assert missing.is_error and payload(missing)["error"] == "no durable fact named 'tz'"
    history: Any = client.get(
        "/agents-api/facts/history?agentId=agent-1&userId=user-1&key=tz", headers=auth
    ).json
    assert [(v["changedBy"], v["removedBy"]) for v in history["history"]] == [("agent", "agent")]


def test_r19_manage_topic_memory_promotes_and_invalidates_after_commit(
    server: Server[Any],
    session: dict[str, Any],
    connection: Connection,
    queue: RecordingQueue,
) -> None:
    sid, tid = session["id"], session["activeTopicId"]
    result = call(
        server, "manage_topic_memory", {"sessionId": sid, "action": "promote", "topicId": tid}
    )
    assert payload(result)["result"] == {"topicId": tid, "memoryState": "promoted"}
    flags = connection.execute(
        text("SELECT keep_in_memory, keep_in_memory_manually_set FROM topics WHERE id = :t"),
        {"t": tid},
    ).one()
    assert tuple(flags) == (True, False)  # the agent's choice, not the user's
    assert [job.task for job in queue.sent] == [INVALIDATE_MEMORY]  # R15, sent after commit


def test_r20_a_refused_curation_is_a_tool_error_and_still_joins_the_thread(
    server: Server[Any],
    client: FlaskClient,
    auth: dict[str, str],
    session: dict[str, Any],
    connection: Connection,
) -> None:
    sid, tid = session["id"], session["activeTopicId"]
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth)
    refused = call(
        server, "manage_topic_memory", {"sessionId": sid, "action": "demote", "topicId": tid}
    )
    assert refused.is_error
    assert payload(refused)["error"] == KEEP_SET_BY_USER
    keep = connection.execute(
        text("SELECT keep_in_memory FROM topics WHERE id = :t"), {"t": tid}
    ).scalar_one()
    assert keep is True
    assert json.loads(tool_messages(connection, sid)[-1].content)["error"] == KEEP_SET_BY_USER


# --- the context stack -----------------------------------------------------------------


def test_r1_get_context_is_exactly_the_http_context(
    server: Server[Any], client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid = session["id"]
    client.put("/agents-api/agents/agent-1", json={"soul": "You are Planner."}, headers=auth)
    post_message(client, auth, sid, "we ship on Friday")
    call(server, "notes", {"sessionId": sid, "op": "$set", "content": "ship Friday"})
    client.put(f"/agents-api/sessions/{sid}/working-memory", json={"step": 2}, headers=auth)

    over_mcp = payload(call(server, "get_context", {"sessionId": sid}))
    over_http: Any = client.get(f"/agents-api/sessions/{sid}/context", headers=auth).json
    assert over_mcp == over_http
    assert over_mcp["layers"]["stable"]["soul"] == "You are Planner."
    assert over_mcp["layers"]["semiStable"]["notes"] == "ship Friday"
    assert over_mcp["layers"]["volatile"]["workingMemory"] == {"step": 2}


# --- isolation and bad input -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("notes", {"op": "$set", "content": "planted"}),
        ("important_info", {"op": "read"}),
        ("get_context", {}),
    ],
)
def test_another_orgs_session_is_not_found_and_untouched(
    server: Server[Any],
    client: FlaskClient,
    other_auth: dict[str, str],
    connection: Connection,
    name: str,
    arguments: dict[str, Any],
) -> None:
    foreign = new_session(client, other_auth)["id"]
    result = call(server, name, {"sessionId": foreign, **arguments})
    assert result.is_error
    assert payload(result) == {
        "error": {"code": "not_found", "message": f"session {foreign} not found"}
    }
    assert tool_messages(connection, foreign) == []


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("notes", {"op": "$set", "content": "x"}, "sessionId"),
        ("notes", {"sessionId": "not-a-uuid", "op": "read"}, "sessionId"),
        ("notes", {"sessionId": 42, "op": "read"}, "sessionId"),
        ("notes", {"sessionId": "<sid>", "op": "$push", "content": "x"}, "op"),
        ("notes", {"sessionId": "<sid>", "op": "$set"}, "content"),
        ("important_info", {"sessionId": "<sid>", "op": "$set", "key": "k"}, "value"),
        ("manage_topic_memory", {"sessionId": "<sid>", "action": "promote"}, "topicId"),
        ("manage_topic_memory", {"sessionId": "<sid>", "action": "keep", "topicId": "x"}, "action"),
        ("get_context", {"sessionId": "<sid>", "verbose": True}, "verbose"),
    ],
)
def test_bad_arguments_are_a_tool_error_naming_the_field_and_write_nothing(
    server: Server[Any],
    session: dict[str, Any],
    connection: Connection,
    name: str,
    arguments: dict[str, Any],
    field: str,
) -> None:
    if arguments.get("sessionId") == "<sid>":
        arguments = {**arguments, "sessionId": session["id"]}
    result = call(server, name, arguments)
    assert result.is_error
    error = payload(result)["error"]
    assert error["code"] == "validation_error"
    assert field in error["message"]
    assert tool_messages(connection, session["id"]) == []


def test_an_unknown_tool_is_a_tool_error(server: Server[Any], session: dict[str, Any]) -> None:
    result = call(server, "search", {"sessionId": session["id"]})
    assert result.is_error and payload(result)["error"]["code"] == "not_found"


def test_a_revoked_or_missing_key_is_unauthorized(
    mcp_runtime: Runtime, api_key: str, session: dict[str, Any], connection: Connection
) -> None:
    arguments = {"sessionId": session["id"], "op": "read"}
    missing = call(build_server(mcp_runtime), "notes", arguments)
    assert payload(missing)["error"]["code"] == "unauthorized"
    connection.execute(text("UPDATE api_keys SET revoked_at = now()"))
    revoked = call(build_server(mcp_runtime, api_key=api_key), "notes", arguments)
    assert payload(revoked)["error"] == {
        "code": "unauthorized",
        "message": "unknown or revoked API key",
    }
    assert tool_messages(connection, session["id"]) == []


# --- real transports, on committed data ------------------------------------------------


def committed_key_and_session(factory: sessionmaker[Session]) -> tuple[str, str]:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        key = create_api_key(uow=uow, org_name=f"mcp-{uuid.uuid4().hex[:12]}")
        org_id = org_for_key(uow=uow, key=key)
        assert org_id is not None
        view = create_session(uow=uow, org_id=org_id, agent_id="agent-1", user_id="user-1")
        uow.commit()
    return key, str(view.session.id)


def committed_tool_messages(factory: sessionmaker[Session], session_id: str) -> list[Any]:
    with factory() as db:
        return tool_messages(db.connection(), session_id)


def test_r7_driftless_mcp_over_real_stdio(
    settings: Settings, committed_factory: sessionmaker[Session]
) -> None:
    key, sid = committed_key_and_session(committed_factory)
    assert settings.database_url and settings.redis_url and settings.broker_url
    parameters = StdioServerParameters(
        command=str(Path(sys.executable).parent / "driftless"),
        args=["mcp"],
        env={
            "DATABASE_URL": settings.database_url,
            "REDIS_URL": settings.redis_url,
            "CELERY_BROKER_URL": settings.broker_url,
            "DRIFTLESS_API_KEY": key,
        },
    )

    async def session_over_stdio(client: Client) -> tuple[list[str], CallToolResult]:
        names = [t.name for t in (await client.list_tools()).tools]
        written = await client.call_tool(
            "notes", {"sessionId": sid, "op": "$set", "content": "over stdio"}
        )
        return names, written

    names, written = run(session_over_stdio, parameters)
    assert names == ["notes", "important_info", "manage_topic_memory", "recall", "get_context"]
    assert payload(written)["result"]["content"] == "over stdio"
    rows = committed_tool_messages(committed_factory, sid)
    assert [r.tool_name for r in rows] == ["notes", "notes"]
    assert json.loads(rows[0].content)["call"]["arguments"]["content"] == "over stdio"


def test_driftless_mcp_over_stdio_refuses_to_start_without_a_valid_key(
    settings: Settings,
) -> None:
    from click.testing import CliRunner

    from worker.cli import main

    env = {"DATABASE_URL": settings.database_url or "", "REDIS_URL": settings.redis_url or ""}
    missing = CliRunner().invoke(main, ["mcp"], env={**env, "DRIFTLESS_API_KEY": ""})
    assert missing.exit_code != 0 and "DRIFTLESS_API_KEY" in missing.output
    unknown = CliRunner().invoke(main, ["mcp"], env={**env, "DRIFTLESS_API_KEY": "dl_nope"})
    assert unknown.exit_code != 0 and "unknown or revoked" in unknown.output


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serving_http(rt: Runtime) -> Iterator[str]:
    port = free_port()
    app = http_app(rt, host="127.0.0.1", port=port)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=15, what="the MCP HTTP server")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def post_status(url: str, headers: dict[str, str]) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_streamable_http_authenticates_each_request_by_bearer_key(
    settings: Settings, committed_factory: sessionmaker[Session]
) -> None:
    key, sid = committed_key_and_session(committed_factory)
    other_key, _ = committed_key_and_session(committed_factory)
    rt = rt_over(settings, committed_factory, RecordingQueue())

    @asynccontextmanager
    async def as_caller(bearer: str) -> AsyncIterator[Any]:
        # A client we pass in is ours to close; the transport leaves it open.
        headers = {"Authorization": f"Bearer {bearer}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as streams,
        ):
            yield streams

    with serving_http(rt) as url:
        assert post_status(url, {}) == 401
        assert post_status(url, {"Authorization": "Bearer dl_unknown"}) == 401

        mine = run(
            lambda c: c.call_tool("notes", {"sessionId": sid, "op": "$set", "content": "http"}),
            as_caller(key),
        )
        theirs = run(lambda c: c.call_tool("get_context", {"sessionId": sid}), as_caller(other_key))

    assert payload(mine)["ok"] is True
    assert payload(theirs)["error"] == {"code": "not_found", "message": f"session {sid} not found"}
    assert [r.tool_name for r in committed_tool_messages(committed_factory, sid)] == ["notes"] * 2


def test_streamable_http_answers_503_when_the_database_is_down(settings: Settings) -> None:
    # Nothing listens on port 1: the key check in the SDK's middleware cannot connect.
    dead = make_session_factory(
        make_engine("postgresql://postgres@127.0.0.1:1/driftless", pool_timeout=1)
    )
    with serving_http(rt_over(settings, dead, RecordingQueue())) as url:
        assert post_status(url, {"Authorization": "Bearer dl_any"}) == 503


def test_the_depth_and_size_limits_hold_over_mcp_as_over_http(
    server: Server[Any], session: dict[str, Any], connection: Connection
) -> None:
    """[2.1] items 3 and 6: the caps live in the domain, so MCP cannot bypass them."""
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    for value, problem in ((deep, "nested deeper than 32"), ("x" * 200_000, "at most 50000")):
        result = call(
            server,
            "important_info",
            {"sessionId": session["id"], "op": "$set", "key": "k", "value": value},
        )
        assert result.is_error
        assert problem in payload(result)["error"]["message"]
    assert tool_messages(connection, session["id"]) == []
    facts = connection.execute(text("SELECT count(*) FROM facts")).scalar_one()
    full = [
        payload(call(server, "important_info", {
            "sessionId": session["id"], "op": "$set", "key": f"k{i}", "value": "v" * 16_000,
        }))["ok"]
        for i in range(5)
    ]  # fmt: skip
    assert full == [True, True, True, True, False]
    assert connection.execute(text("SELECT count(*) FROM facts")).scalar_one() == facts + 1


def test_r7_recall_over_mcp_finds_the_scopes_words_and_joins_the_thread(
    server: Server[Any],
    client: FlaskClient,
    auth: dict[str, str],
    session: dict[str, Any],
    connection: Connection,
) -> None:
    sid = session["id"]
    post_message(client, auth, sid, "The staging database is called ferret.")

    found = payload(call(server, "recall", {"sessionId": sid, "query": "staging database"}))

    assert found["ok"] is True
    assert [hit["snippet"] for hit in found["result"]["results"]] == [
        "The staging database is called ferret."
    ]
    assert [r.tool_name for r in tool_messages(connection, sid)] == ["recall", "recall"]
