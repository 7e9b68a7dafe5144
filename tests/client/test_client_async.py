"""`driftless_client.AsyncClient` against the real system: the same operations, awaited,
with the same answers and errors as `Client`."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from driftless_client import ApiError, AsyncClient
from tests.client.conftest import System


async def eventually(
    probe: Callable[[], Awaitable[bool]], *, what: str, timeout: float = 30.0
) -> None:
    """Await `probe` until it is true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


@pytest.fixture
async def client(system: System, org_key: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(system.base_url, org_key) as client:
        yield client


@pytest.mark.anyio
async def test_a_session_round_trip_through_the_async_client(client: AsyncClient) -> None:
    session = await client.create_session("async-bot", "user-1")
    sid, topic_id = session["id"], session["activeTopicId"]

    one = await client.post_messages(sid, {"role": "user", "content": "Book a table for two."})
    assert one["topicId"] == topic_id
    batch = await client.post_messages(
        sid,
        [
            {"role": "assistant", "content": "For when?"},
            {"role": "user", "content": "Friday at eight."},
        ],
    )
    assert len(batch["messages"]) == 2
    turn = await client.post_messages(
        sid, [{"role": "assistant", "content": "Booked."}], context=True
    )
    assert turn["context"]["messages"][-1]["content"] == "Booked."
    assert (await client.context(sid))["messages"] == turn["context"]["messages"]

    listed = await client.messages(sid)
    assert [m["content"] for m in listed["messages"]] == [
        "Book a table for two.",
        "For when?",
        "Friday at eight.",
        "Booked.",
    ]
    assert [t["id"] for t in (await client.session(sid))["topics"]] == [topic_id]

    promoted = await client.set_memory_state(topic_id, "promoted")
    assert promoted["memoryState"] == "promoted"

    async def remembered() -> bool:
        # The context above cached the scope's memory; the worker's invalidation job
        # refreshes it after the curation (eventually, by design).
        memory = await client.memory("async-bot", "user-1")
        return [e["topicId"] for e in memory["entries"]] == [topic_id]

    await eventually(remembered, what="the promoted topic in the scope's memory")

    await client.merge_facts("async-bot", "user-1", {"party": 2})
    assert await client.facts("async-bot", "user-1") == {"facts": {"party": 2}}
    await client.delete_fact("async-bot", "user-1", "party")
    assert await client.facts("async-bot", "user-1") == {"facts": {}}
    party = (await client.facts_history("async-bot", "user-1", "party"))["history"]
    assert [(v["value"], v["removedBy"]) for v in party] == [(2, "user")]

    assert (await client.evaluate(sid, "navigation"))["status"] in {
        "scheduled",
        "coalesced",
        "suppressed",
    }


@pytest.mark.anyio
async def test_the_async_client_raises_api_error_for_404_and_422(client: AsyncClient) -> None:
    with pytest.raises(ApiError) as missing:
        await client.topic(str(uuid.uuid4()))
    assert (missing.value.status, missing.value.code) == (404, "not_found")

    sid = (await client.create_session("async-bot", "user-2"))["id"]
    with pytest.raises(ApiError) as invalid:
        await client.evaluate(sid, "whenever")  # type: ignore[arg-type]
    assert (invalid.value.status, invalid.value.code) == (422, "validation_error")
    assert "trigger" in invalid.value.message


@pytest.mark.anyio
async def test_an_odd_agent_id_round_trips_exactly_through_the_async_client(
    client: AsyncClient,
) -> None:
    agent = "a:{b} c/é"
    session = await client.create_session(agent, "ü 1")
    assert session["agentId"] == agent
    found = await client.sessions(agent, "ü 1")
    assert [s["agentId"] for s in found["sessions"]] == [agent]
    in_a_path = "a:{b} c?é#%25"  # not `/`: see test_an_id_holding_a_slash_reaches_its_path_route
    assert (await client.put_agent(in_a_path, soul="odd"))["agentId"] == in_a_path
    assert (await client.agent(in_a_path))["soul"] == "odd"


@pytest.mark.anyio
async def test_the_async_events_stream_starts_with_ready(client: AsyncClient) -> None:
    sid = (await client.create_session("async-bot", "user-3"))["id"]
    async with contextlib.aclosing(client.events(sid)) as events:
        assert await anext(events) == {"event": "ready", "data": {}}


@pytest.mark.anyio
async def test_the_async_export_streams_the_scope_header_first(client: AsyncClient) -> None:
    sid = (await client.create_session("async-export-bot", "user-4"))["id"]
    await client.post_messages(sid, {"role": "user", "content": "hello"})
    async with contextlib.aclosing(client.export("async-export-bot", "user-4")) as lines:
        kinds = [line["type"] async for line in lines]
    assert kinds[0] == "header" and kinds.count("message") == 1
