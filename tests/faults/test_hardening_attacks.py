"""The attacks of [2.1], replayed as a campaign with counts (README, fault table).

Each test below repeats one attack many ways and reports attempts, leaks, 5xx and
writes after a rejected request; all must be 0. The tests that prove each fix one case at
a time live in tests/integration (test_scope_isolation, test_json_limits,
test_size_limits, test_stale_refresh, test_erasure); the event-stream flood is
tests/faults/test_stream_starvation.py.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlencode

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

from shared.domain.limits import MAX_FACTS_BYTES, MAX_MESSAGE_CHARS, json_size
from shared.evaluations.pipeline import evaluate_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.memory.scope import Scope
from tests.faults.conftest import report
from tests.forks import HeldLLM, alpha_then_beta, assert_alpha_untouched, fork_at, load_topic
from tests.helpers import new_session

# Every id of 1–3 characters over "a" and ":" (where a `:`-joined key collides), and
# ids with braces (a Cluster hash tag), blanks and two spellings of é.
SCOPE_IDS = [
    *("".join(p) for n in (1, 2, 3) for p in itertools.product("a:", repeat=n)),
    *("{a", "a}", "{", "}", " a", "a ", "é", "e\u0301"),
]


@dataclass
class Tally:
    attempts: int = 0
    leaks: list[str] = field(default_factory=list)
    errors_5xx: int = 0
    writes_after_rejection: int = 0

    def line(self, what: str) -> str:
        return (
            f"{what}: {self.attempts} attempts, {len(self.leaks)} leaks,"
            f" {self.errors_5xx} 5xx, {self.writes_after_rejection} writes after a rejected request"
        )


class State:
    """Every row (as a per-table count and checksum) and every Redis key with its value."""

    def __init__(self, connection: Connection, client: redis.Redis) -> None:
        self._connection, self._redis = connection, client
        self._tables = list(
            connection.execute(
                text(
                    "SELECT table_name FROM information_schema.tables"
                    " WHERE table_schema = 'public' AND table_name <> 'alembic_version'"
                )
            ).scalars()
        )

    def read(self) -> tuple[Any, ...]:
        rows = tuple(
            self._connection.execute(
                text(f'SELECT count(*), coalesce(sum(hashtext(t::text)), 0) FROM "{t}" t')
            ).one()
            for t in self._tables
        )
        # Every request takes a token from its org's bucket: accounting, not data.
        keys = sorted(
            key
            for key in self._redis.scan_iter(count=1000)
            if not key.startswith(b"driftless:requests:")
        )
        with self._redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.dump(key)
            values = pipe.execute()
        return rows, tuple(zip(keys, values, strict=True))


@pytest.fixture
def state(connection: Connection, redis_url: str) -> Iterator[State]:
    client = redis.Redis.from_url(redis_url)
    yield State(connection, client)
    client.close()


def _send(client: FlaskClient, auth: dict[str, str], method: str, url: str, raw: str) -> Any:
    headers = {**auth, "Content-Type": "application/json"}
    return client.open(url, method=method, data=raw.encode(), headers=headers)


def _rejected(tally: Tally, state: State, send: Callable[[], Any], why: str) -> Any:
    """Send a request that must be refused with a 4xx and write nothing; count it."""
    before = state.read()
    response = send()
    tally.attempts += 1
    if response.status_code >= 500:
        tally.errors_5xx += 1
    elif response.status_code < 400:
        tally.leaks.append(f"{why}: accepted ({response.status_code})")
    if state.read() != before:
        tally.writes_after_rejection += 1
    return response


def _reads_answer(tally: Tally, client: FlaskClient, auth: dict[str, str], sid: str) -> None:
    """The scope's reads all still answer (a stored bad document broke them)."""
    reads = [
        client.get("/agents-api/facts?agentId=agent-1&userId=user-1", headers=auth),
        client.get(f"/agents-api/sessions/{sid}/context", headers=auth),
        client.post(
            f"/agents-api/sessions/{sid}/tools/important_info",
            json={"arguments": {"op": "read"}},
            headers=auth,
        ),
    ]
    tally.errors_5xx += sum(1 for r in reads if r.status_code >= 500)
    tally.leaks += [f"read answered {r.status_code}" for r in reads if r.status_code != 200]


def test_item1_no_scope_reads_another_scopes_memory(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    """Every pair of those ids is its own scope, in one org."""
    scopes = list(itertools.product(SCOPE_IDS, repeat=2))
    joined = [f"{agent}:{user}" for agent, user in scopes]
    confusable = sum(1 for key in joined if joined.count(key) > 1)  # under the old keys
    tally, owner = Tally(), {}
    for agent, user in scopes:
        session = new_session(client, auth, agent=agent, user=user)
        client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
        tid = session["activeTopicId"]
        client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth)
        owner[tid] = (agent, user)
    for agent, user in scopes:  # each read fills or hits the scope's Redis cache
        response = client.get(
            "/agents-api/memory?" + urlencode({"agentId": agent, "userId": user}), headers=auth
        )
        tally.attempts += 1
        tally.errors_5xx += response.status_code >= 500
        for entry in response.json["entries"]:  # type: ignore[index]
            if owner[entry["topicId"]] != (agent, user):
                tally.leaks.append(f"{owner[entry['topicId']]!r} served to {(agent, user)!r}")
    report(tally.line(f"item 1: {len(scopes)} scopes ({confusable} confusable when joined by ':')"))
    assert (tally.leaks, tally.errors_5xx) == ([], 0)
    assert len({Scope(uuid.uuid4(), a, u).cache_tag for a, u in scopes}) == len(scopes)


WRITE_BODIES = [
    ("PUT", "/agents-api/agents/a1", '{{"soul": "s", "skills": [{v}], "tools": []}}'),
    ("POST", "/agents-api/sessions", '{{"agentId": "a", "userId": "u", "x": {v}}}'),
    ("POST", "/agents-api/sessions/{sid}/messages", '{{"role": "user", "content": "x", "n": {v}}}'),
    ("POST", "/agents-api/sessions/{sid}/topics", '{{"title": {v}}}'),
    ("POST", "/agents-api/sessions/{sid}/evaluate", '{{"trigger": {v}}}'),
    ("PUT", "/agents-api/sessions/{sid}/working-memory", '{{"k": {v}}}'),
    ("PUT", "/agents-api/facts?agentId=agent-1&userId=user-1", '{{"k": {v}}}'),
    (
        "POST",
        "/agents-api/sessions/{sid}/tools/important_info",
        '{{"arguments": {{"op": "$set", "key": "k", "value": {v}}}}}',
    ),
    ("PUT", "/agents-api/topics/{tid}/memory", '{{"state": {v}}}'),
]


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize(
    ("item", "values"),
    [
        (
            "3: nested JSON (depth 33, 256, 1,000, 100,000)",
            [_nested(d) for d in (33, 256, 1000, 100_000)],
        ),
        ("4: NaN, Infinity, 1e999", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "[NaN]"]),
    ],
)
def test_items3_and_4_unservable_json_is_refused_on_every_write_route(
    client: FlaskClient, auth: dict[str, str], state: State, item: str, values: list[str]
) -> None:
    session = new_session(client, auth)
    sid, tid = session["id"], session["activeTopicId"]
    tally = Tally()
    for (method, path, body), value in itertools.product(WRITE_BODIES, values):
        url = path.format(sid=sid, tid=tid)
        send = partial(_send, client, auth, method, url, body.format(v=value))
        response = _rejected(tally, state, send, url)
        if response.status_code != 422:
            tally.leaks.append(f"{method} {url}: {response.status_code}, not 422")
        _reads_answer(tally, client, auth, sid)
    report(tally.line(f"item {item}"))
    assert (tally.leaks, tally.errors_5xx, tally.writes_after_rejection) == ([], 0, 0)


def test_item6_size_caps_hold_on_the_tool_path(
    client: FlaskClient, auth: dict[str, str], state: State, connection: Connection
) -> None:
    sid = new_session(client, auth)["id"]
    tally = Tally()
    tool = f"/agents-api/sessions/{sid}/tools"
    oversized = [
        ("important_info", {"op": "$set", "key": "k", "value": "x" * 200_000}),
        ("important_info", {"op": "$set", "key": "k", "value": ["x" * 1000] * 100}),
        ("notes", {"op": "$set", "content": "n" * 60_000}),
        ("notes", {"op": "update", "content": "n" * 60_000}),
    ]
    for (name, arguments), _ in itertools.product(oversized, range(5)):
        send = partial(client.post, f"{tool}/{name}", json={"arguments": arguments}, headers=auth)
        _rejected(tally, state, send, name)
    # Values under the per-call caps until the facts document is full: refused, not stored.
    for i in range(12):
        answer: Any = client.post(
            f"{tool}/important_info",
            json={"arguments": {"op": "$set", "key": f"k{i}", "value": "v" * 15_000}},
            headers=auth,
        ).json
        tally.attempts += 1
        facts: Any = client.get(
            "/agents-api/facts?agentId=agent-1&userId=user-1", headers=auth
        ).json
        if json_size(facts["facts"]) > MAX_FACTS_BYTES:
            tally.leaks.append(f"facts document of {json_size(facts['facts'])} bytes stored")
        if answer.get("ok") is False and "would exceed" not in answer["error"]:
            tally.leaks.append(f"unexpected refusal {answer['error']}")
    longest = connection.execute(
        text("SELECT max(length(content)) FROM messages WHERE session_id = :s"), {"s": sid}
    ).scalar_one()
    if longest > MAX_MESSAGE_CHARS:
        tally.leaks.append(f"a message of {longest} characters stored")
    small = client.put(
        "/agents-api/facts?agentId=agent-1&userId=user-1", json={"small": 1}, headers=auth
    )
    if small.status_code != 200:
        tally.leaks.append(f"the user's own small PUT /facts answered {small.status_code}")
    report(tally.line("item 6: oversized tool calls and a facts document filled by tools"))
    assert (tally.leaks, tally.errors_5xx, tally.writes_after_rejection) == ([], 0, 0)


def test_item5_no_stale_answer_is_written_over_a_forked_topic(
    committed_factory: sessionmaker[Session],
) -> None:
    """The race of item 5, run again and again with the answer held across a fork."""
    tally = Tally()
    new_uow = lambda: UnitOfWork(committed_factory, RecordingQueue())  # noqa: E731
    for _ in range(10):
        world = alpha_then_beta(new_uow, committed_factory)
        held = HeldLLM()
        with ThreadPoolExecutor(max_workers=1) as pool:
            job = pool.submit(
                evaluate_topic, new_uow=new_uow, llm=held, topic_id=world.topic_id,
                trigger="heartbeat", scan_back=10,
            )  # fmt: skip
            held.summary_asked.wait(timeout=30)
            fork_at(new_uow, world.topic_id, world.ids[9])
            held.release.set()
            outcome = job.result(timeout=30)
        tally.attempts += 1
        try:
            assert_alpha_untouched(load_topic(new_uow, world.topic_id), world.ids)
        except AssertionError as exc:
            tally.leaks.append(f"{outcome.outcome}: {exc}")
    report(tally.line("item 5: refresh answer held across a fork"))
    assert tally.leaks == []


def test_item7_erasure_leaves_no_redis_key_of_the_user(
    client: FlaskClient, auth: dict[str, str], redis_url: str
) -> None:
    client_redis = redis.Redis.from_url(redis_url)
    tally = Tally()
    for i in range(20):
        user = f"user:{i} {{é}}"
        session = new_session(client, auth, agent="planner", user=user)
        sid, tid = session["id"], session["activeTopicId"]
        if i % 2:  # half of them had memory cached, working memory, a trigger
            client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth)
            client.get(
                "/agents-api/memory?" + urlencode({"agentId": "planner", "userId": user}),
                headers=auth,
            )
            client.put(f"/agents-api/sessions/{sid}/working-memory", json={"s": 1}, headers=auth)
            client.post(
                f"/agents-api/sessions/{sid}/evaluate", json={"trigger": "manual"}, headers=auth
            )
        erased = client.delete(
            f"/agents-api/agents/planner/users/{user.replace(' ', '%20')}", headers=auth
        )
        tally.attempts += 1
        tally.errors_5xx += erased.status_code >= 500
        scope = Scope(uuid.UUID(session["orgId"]), "planner", user)
        needles = [scope.cache_tag, sid, tid, user]
        left = [
            k for k in client_redis.scan_iter(count=1000) if any(n.encode() in k for n in needles)
        ]
        tally.leaks += [k.decode(errors="replace") for k in left]
    report(tally.line("item 7: Redis keys naming an erased user"))
    assert (tally.leaks, tally.errors_5xx) == ([], 0)
