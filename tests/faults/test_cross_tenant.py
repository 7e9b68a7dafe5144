"""Cross-tenant probes: another org's key with this org's ids, on every /agents-api route.

The routes come from the app's own url_map, their query parameters and bodies from its
OpenAPI document, so a new route is probed without touching this file (and a path
parameter this file cannot fill fails the run). For each route, org A and org B each get
a fresh world (agent, session, messages, notes, facts, working memory, a promoted closed
topic and an active one, an LLM call charged to the org, all carrying a secret string),
then B calls the route twice:

- "A's ids": A's session/topic/agent/user/fact key in the path, query and body. Routes
  that name a session or topic must answer 404, exactly like an unknown id (docs/contract.md);
  routes named by agent/user/fact key live in the caller's own namespace, so they may
  answer 2xx, but only with B's (empty) data.
- "B's path, A's ids inside": B's own session/topic in the path and A's ids in the
  query and body (`?topicId=`, a tool's `topicId`, `?agentId=&userId=`).

A leak is any of: a 5xx; a non-404 where the contract says 404; A's secret, or an id of
A's that B did not send, in the answer; a row of A's (a row naming A's org, session or
topics, and none of B's) inserted, changed or deleted; a 404 that wrote anything at all;
a Redis key of A's created, changed or deleted; a job about A enqueued. Finally A makes
the same call with its own key and must get a 2xx: the probe was well-formed and aimed at
something real, so B's 404 is isolation, not a typo.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.test import TestResponse

from shared.auth.service import org_for_key
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.base import LLMCall, Usage
from shared.portability.format import dump_line
from shared.usage.service import record_llm_usage
from shared.webhooks.events import EVENT_TYPES
from tests.conftest import new_key
from tests.faults.conftest import report
from tests.helpers import new_session, post_message
from tests.integration.portability.export_file import body, export_lines, session_lines
from web.runtime import unit_of_work

PREFIX = "/agents-api/"
UNPROBED = {"/agents-api/openapi.json"}  # public, names nothing
# Path parameters that name a resource of one org: another org must get 404 there.
OWNED = {"sid", "tid", "webhook_id", "reevaluation_id"}
TOOLS = ("notes", "important_info", "manage_topic_memory")


@dataclass(frozen=True)
class World:
    """One org's data; every text in it carries `secret`."""

    auth: dict[str, str]
    org_id: str
    agent: str
    user: str
    fact_key: str
    sid: str
    topics: tuple[str, str]  # (closed and promoted, active)
    webhook_id: str  # subscribed to every event type; its URL carries the secret
    reevaluation_id: str  # a running campaign over its topics
    secret: str

    @property
    def markers(self) -> tuple[str, ...]:
        """Strings that identify this org's rows, Redis keys and jobs."""
        return (self.org_id, self.sid, *self.topics, self.webhook_id, self.reevaluation_id)

    def names(self) -> dict[str, list[str]]:
        """Values for parameters and body fields, by name."""
        return {
            "sid": [self.sid],
            "tid": list(self.topics),
            "agent_id": [self.agent],
            "agentId": [self.agent],
            "user_id": [self.user],
            "userId": [self.user],
            "key": [self.fact_key],
            "topicId": [self.topics[0]],
            "name": list(TOOLS),  # the tools are built-in, not org data
            "webhook_id": [self.webhook_id],
            # A search for A's secret: B must find none of it, A all of it.
            "q": [self.secret],
            "reevaluation_id": [self.reevaluation_id],
            # A subscription's fields (public addresses: private ones are refused).
            "url": ["http://8.8.8.8/probe"],
            "events": [["facts.changed"]],
        }


def _org_of(factory: sessionmaker[Session], key: str) -> str:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        return str(org_for_key(uow=uow, key=key))


def _charge_a_call(factory: sessionmaker[Session], org_id: uuid.UUID, model: str) -> None:
    """An LLM call in the org's usage ledger (GET /agents-api/usage), as a worker records it."""
    call = LLMCall(org_id=org_id, model=model, purpose="summarize", failed=False, usage=Usage(9, 1))
    with UnitOfWork(factory, RecordingQueue()) as uow:
        record_llm_usage(uow=uow, org_id=org_id, call=call)
        uow.commit()


def _make_world(client: FlaskClient, factory: sessionmaker[Session]) -> World:
    tag = uuid.uuid4().hex[:10]
    secret = f"secret-{tag}"
    key = new_key(factory)
    auth = {"Authorization": f"Bearer {key}"}
    agent, user, fact_key = f"agent-{tag}", f"user-{tag}", f"fact-{tag}"

    def ok(response: TestResponse) -> Any:
        assert response.status_code < 300, response.json
        return response.json

    ok(client.put(f"/agents-api/agents/{agent}", json={"soul": secret}, headers=auth))
    # Subscribed first, so the changes below are events with deliveries.
    webhook = {"url": f"http://8.8.8.8/hooks/{secret}", "events": list(EVENT_TYPES)}
    webhook_id = ok(client.post("/agents-api/webhooks", json=webhook, headers=auth))["id"]
    # Its own model: B must neither see it (nor its key) nor change or remove it.
    provider = {
        "baseUrl": f"http://8.8.8.8/{secret}/v1",
        "apiKey": f"key-{secret}",
        "model": secret,
    }
    ok(client.put("/agents-api/provider", json=provider, headers=auth))
    session = new_session(client, auth, agent=agent, user=user)
    sid, closed = session["id"], session["activeTopicId"]
    for n in range(6):
        post_message(client, auth, sid, f"{secret} {n}", "user" if n % 2 == 0 else "assistant")
    tools = f"/agents-api/sessions/{sid}/tools/notes"
    notes = {"arguments": {"op": "$set", "content": secret}}
    ok(client.post(tools, json=notes, headers=auth))
    scope = f"agentId={agent}&userId={user}"
    ok(client.put(f"/agents-api/facts?{scope}", json={fact_key: secret}, headers=auth))
    memory = {secret: secret}
    ok(client.put(f"/agents-api/sessions/{sid}/working-memory", json=memory, headers=auth))
    ok(client.put(f"/agents-api/topics/{closed}/memory", json={"state": "promoted"}, headers=auth))
    opened = ok(
        client.post(f"/agents-api/sessions/{sid}/topics", json={"title": secret}, headers=auth)
    )
    ok(client.post(tools, json=notes, headers=auth))
    ok(client.get(f"/agents-api/memory?{scope}", headers=auth))  # fills the Redis cache
    reevaluation = ok(client.post("/agents-api/reevaluations", json={}, headers=auth))
    org_id = _org_of(factory, key)
    _charge_a_call(factory, uuid.UUID(org_id), model=f"model-{secret}")
    return World(
        auth=auth,
        org_id=org_id,
        agent=agent,
        user=user,
        fact_key=fact_key,
        sid=sid,
        topics=(closed, opened["id"]),
        webhook_id=webhook_id,
        reevaluation_id=reevaluation["id"],
        secret=secret,
    )


# --- the routes, from the app ---------------------------------------------------------


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # OpenAPI style: /agents-api/sessions/{sid}
    path_params: tuple[str, ...]
    query_params: tuple[tuple[str, bool], ...]  # (name, required)
    body_schema: dict[str, Any] | None

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"


def api_routes(app: Any) -> list[Route]:
    """Every /agents-api route of the app, with what its OpenAPI operation declares."""
    document: dict[str, Any] = app.api_doc
    routes = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(PREFIX) or rule.rule in UNPROBED:
            continue
        path = rule.rule.replace("<", "{").replace(">", "}")
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            operation = document["paths"].get(path, {}).get(method.lower(), {})
            query = tuple(
                (p["name"], bool(p.get("required")))
                for p in operation.get("parameters", [])
                if p["in"] == "query"
            )
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            schema = _resolve(document, body["schema"]) if body else None
            routes.append(Route(method, path, tuple(sorted(rule.arguments)), query, schema))
    return routes


def _resolve(document: dict[str, Any], schema: Any) -> Any:
    """`schema` with every $ref replaced by what it names (request bodies do not recurse;
    a body of several forms, as POST …/messages, is a oneOf of references)."""
    if isinstance(schema, list):
        return [_resolve(document, item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return _resolve(document, document["components"]["schemas"][name])
    return {key: _resolve(document, value) for key, value in schema.items()}


def _minimal(schema: dict[str, Any], names: dict[str, list[str]], field_name: str = "") -> Any:
    """The smallest valid instance of `schema`; a field named like a parameter gets its value."""
    if field_name in names:
        return names[field_name][0]
    if "enum" in schema:
        return schema["enum"][0]
    for option in schema.get("anyOf", []) + schema.get("oneOf", []):
        if option.get("type") != "null":
            return _minimal(option, names, field_name)
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        instance = {
            name: _minimal(properties[name], names, name) for name in schema.get("required", [])
        }
        if not instance and schema.get("minProperties", 0) > 0:
            instance = {"probe": "probe"}
        return instance
    return {"string": "probe", "integer": 1, "number": 1, "boolean": True, "array": []}.get(
        str(kind), "probe"
    )


def _export_naming(ids: dict[str, list[str]]) -> str:
    """An export (NDJSON) of a session under the ids' session, topics, agent and user as
    its source ids: imported, it lands in the caller's org under ids of its own."""

    def as_uuid(value: str) -> uuid.UUID:  # the path probe's placeholders are not ids
        try:
            return uuid.UUID(value)
        except ValueError:
            return uuid.uuid5(uuid.NAMESPACE_URL, value)

    agent, user = ids["agentId"][0], ids["userId"][0]
    header, profile = export_lines(sessions=0, agent=agent, user=user)[:2]
    session = session_lines(
        session_id=as_uuid(ids["sid"][0]), first_message_id=1, messages=4, agent=agent,
        user=user, topic_ids=(as_uuid(ids["tid"][0]), as_uuid(ids["tid"][-1])),
    )  # fmt: skip
    return body([header, profile, *(dump_line(line) for line in session)]).decode()


def _body(route: Route, path: dict[str, str], ids: dict[str, list[str]]) -> Any:
    """The route's body: minimal and valid, with ids from `ids` wherever a field names one."""
    if route.path == "/agents-api/import":  # a streamed NDJSON body, not a JSON document
        return _export_naming(ids)
    if route.body_schema is None:
        return None
    if route.path.endswith("/tools/{name}"):
        # A generic minimal body ({"arguments": {}}) is refused by every tool: give each
        # tool arguments that point at the other org's data.
        arguments = {
            "notes": {"op": "read", "topicId": ids["topicId"][0]},
            "important_info": {"op": "read", "key": ids["key"][0]},
            "manage_topic_memory": {"action": "deprecate", "topicId": ids["topicId"][0]},
        }[path["name"]]
        return {"arguments": arguments}
    return _minimal(route.body_schema, ids)


@dataclass(frozen=True)
class Call:
    route: Route
    variant: str  # "A's ids" or "B's path, A's ids inside"
    url: str
    body: Any

    @property
    def sent(self) -> str:
        return self.url + json.dumps(self.body)


def calls(
    route: Route, path_ids: dict[str, list[str]], ids: dict[str, list[str]], variant: str
) -> list[Call]:
    """One call per combination of path values; query and body ids from `ids`."""
    missing = [p for p in route.path_params if p not in path_ids]
    if missing:
        raise LookupError(f"{route.label}: no value for path parameter(s) {missing}")
    result = []
    for values in itertools.product(*(path_ids[p] for p in route.path_params)):
        path = dict(zip(route.path_params, values, strict=True))
        url = route.path.format(**path)
        query = []
        for name, required in route.query_params:
            if name in ids:
                query.append(f"{name}={ids[name][0]}")
            elif required:
                raise LookupError(f"{route.label}: no value for query parameter {name!r}")
        if query:
            url += "?" + "&".join(query)
        result.append(Call(route, variant, url, _body(route, path, ids)))
    return result


# --- what A owns, before and after ------------------------------------------------------


@dataclass
class Snapshot:
    rows: set[tuple[str, str]]  # (table, row as text)
    keys: dict[str, bytes | None]  # Redis keys naming A, with their dumped value
    expiring: set[str]  # of those, keys about to expire on their own
    jobs: int
    jobs_about_a: int

    def a_rows(self, a: World, b: World) -> set[tuple[str, str]]:
        return {
            (table, row)
            for table, row in self.rows
            if any(m in row for m in a.markers) and not any(m in row for m in b.markers)
        }


@dataclass
class Observer:
    connection: Connection
    redis: redis.Redis
    queue: RecordingQueue
    tables: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tables = list(
            self.connection.execute(
                text(
                    "SELECT table_name FROM information_schema.tables"
                    " WHERE table_schema = 'public' AND table_name <> 'alembic_version'"
                )
            ).scalars()
        )

    def snapshot(self, a: World) -> Snapshot:
        rows = {
            (table, row)
            for table in self.tables
            for row in self.connection.execute(text(f'SELECT t::text FROM "{table}" t')).scalars()
        }
        keys: dict[str, bytes | None] = {}
        expiring = set()
        for raw in self.redis.scan_iter(count=1000):
            name = raw.decode(errors="replace")
            if any(m in name for m in a.markers):
                keys[name] = self.redis.dump(raw)
                ttl = self.redis.pttl(raw)
                if 0 <= ttl < 10_000:
                    expiring.add(name)
        about_a = sum(1 for job in self.queue.sent if any(m in repr(job) for m in a.markers))
        return Snapshot(rows, keys, expiring, len(self.queue.sent), about_a)


def _answer(client: FlaskClient, call: Call, auth: dict[str, str]) -> tuple[int, str]:
    # A text body is NDJSON (POST /import); every other body is a JSON document.
    content = {"data": call.body} if isinstance(call.body, str) else {"json": call.body}
    response = client.open(
        call.url, method=call.route.method, headers=auth, buffered=False, **content
    )
    try:
        if response.mimetype == "text/event-stream":
            return response.status_code, ""  # endless by design: the status says enough
        return response.status_code, response.get_data(as_text=True)
    finally:
        response.close()


def leaks_of(
    call: Call, status: int, answer: str, a: World, b: World, before: Snapshot, after: Snapshot
) -> list[str]:
    """Everything wrong with B's call; empty when nothing of A's leaked or changed."""
    found = []
    owned = set(call.route.path_params) & OWNED
    if status >= 500:
        found.append(f"answered {status}")
    elif call.variant == "A's ids" and owned and status != 404:
        found.append(f"answered {status} for another org's {sorted(owned)}, not 404")
    elif call.variant == "A's ids" and status != 404 and not 200 <= status < 300:
        found.append(f"answered {status} (neither 404 nor 2xx)")
    if a.secret in answer:
        found.append("A's secret in the answer")
    names = (*a.markers, a.agent, a.user, a.fact_key)
    shown = [m for m in names if m in answer and m not in call.sent]
    if shown:
        found.append(f"A's ids {shown} in the answer")
    if status == 404 and before.rows != after.rows:
        found.append(f"a 404 wrote rows: {sorted(after.rows ^ before.rows)[:3]}")
    if status == 404 and after.jobs != before.jobs:
        found.append("a 404 enqueued jobs")
    a_before, a_after = before.a_rows(a, b), after.a_rows(a, b)
    if a_before != a_after:
        changed = sorted(a_before ^ a_after)[:3]
        found.append(f"A's rows changed: {changed}")
    for name, value in before.keys.items():
        if after.keys.get(name) != value and name not in before.expiring:
            found.append(f"A's Redis key {name} changed or deleted")
    created = set(after.keys) - set(before.keys)
    if created:
        found.append(f"Redis keys about A created: {sorted(created)}")
    if after.jobs_about_a != before.jobs_about_a:
        found.append("a job about A's data enqueued")
    return found


# --- the tests --------------------------------------------------------------------------


@pytest.fixture
def observer(connection: Connection, redis_url: str, queue: RecordingQueue) -> Iterator[Observer]:
    client = redis.Redis.from_url(redis_url)
    yield Observer(connection, client, queue)
    client.close()


def test_every_api_route_with_a_path_parameter_is_probed(app: Any) -> None:
    """The probes cover the app's routes, not a hand-kept list: a new route with a
    parameter this file cannot fill fails here until it is taught the value."""
    routes = api_routes(app)
    probed = {r.path for r in routes}
    expected = {
        rule.rule.replace("<", "{").replace(">", "}")
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith(PREFIX) and rule.arguments
    }
    assert expected and expected <= probed
    dummy = {
        name: ["x"]
        for name in (
            "sid", "tid", "agent_id", "agentId", "user_id", "userId", "key", "topicId",
            "webhook_id", "q", "reevaluation_id",
        )
    } | {"name": list(TOOLS)}  # fmt: skip
    for route in routes:
        assert calls(route, dummy, dummy, "A's ids"), route.label  # raises on an unknown one
    assert len([r for r in routes if r.path_params]) >= 19  # today's 19, never fewer


def probe(
    routes: list[Route],
    client: FlaskClient,
    factory: sessionmaker[Session],
    observer: Observer,
) -> tuple[int, list[str], list[str]]:
    """B's calls on every route, each against fresh worlds: (calls made, leaks found,
    calls that A's own key could not make either)."""
    leaks: list[str] = []
    unreachable: list[str] = []
    made = 0
    for route in routes:
        a, b = _make_world(client, factory), _make_world(client, factory)
        own = calls(route, a.names(), a.names(), "A's ids")
        inside = calls(route, b.names(), a.names(), "B's path, A's ids inside")
        for call in own + inside:
            before = observer.snapshot(a)
            status, answer = _answer(client, call, b.auth)
            after = observer.snapshot(a)
            made += 1
            leaks += [
                f"{route.label} [{call.variant}] {call.url}: {problem}"
                for problem in leaks_of(call, status, answer, a, b, before, after)
            ]
        # The same calls with A's own key reach real data: B's 404s above are isolation.
        for call in own:
            status, _ = _answer(client, call, a.auth)
            if not 200 <= status < 300:
                unreachable.append(f"{route.label}: A's own call {call.url} answered {status}")
    return made, leaks, unreachable


def test_another_orgs_key_finds_and_changes_nothing_on_any_route(
    app: Any,
    client: FlaskClient,
    session_factory: sessionmaker[Session],
    observer: Observer,
) -> None:
    routes = api_routes(app)
    made, leaks, unreachable = probe(routes, client, session_factory, observer)
    report(f"cross-tenant: {len(routes)} routes probed ({made} calls), {len(leaks)} leaks")
    assert leaks == []
    assert unreachable == []  # else the probe was malformed and proved nothing


def test_the_probe_finds_a_leaky_route_added_to_the_app(
    app: Any, client: FlaskClient, session_factory: sessionmaker[Session], observer: Observer
) -> None:
    """The probe can fail: two routes that forget the org are found without being listed."""

    def read_any(sid: str) -> Any:  # reads a session's messages whatever the caller's org
        with unit_of_work() as uow:
            found = uow.session.execute(
                text(
                    "SELECT m.content FROM messages m JOIN topics t ON t.id = m.topic_id"
                    " WHERE t.session_id = :sid"
                ),
                {"sid": sid},
            )
            return {"messages": list(found.scalars())}

    def write_any(sid: str) -> Any:  # renames another org's topics, then claims 404
        with unit_of_work() as uow:
            uow.session.execute(
                text("UPDATE topics SET title = 'renamed' WHERE session_id = :sid"), {"sid": sid}
            )
            uow.commit()
        return {"error": {"code": "not_found", "message": "no such session"}}, 404

    app.add_url_rule("/agents-api/leaky/<sid>", "leaky_read", read_any)
    app.add_url_rule("/agents-api/leaky/<sid>/rename", "leaky_write", write_any, methods=["POST"])
    leaky = [r for r in api_routes(app) if "/leaky/" in r.path]
    assert len(leaky) == 2
    _, leaks, _ = probe([leaky[0]], client, session_factory, observer)
    assert any("secret in the answer" in leak for leak in leaks), leaks
    assert any("not 404" in leak for leak in leaks), leaks
    _, leaks, unreachable = probe([leaky[1]], client, session_factory, observer)
    assert any("a 404 wrote rows" in leak for leak in leaks), leaks
    assert any("A's rows changed" in leak for leak in leaks), leaks
    assert unreachable  # it answers its own org 404 too


def test_list_endpoints_show_another_org_nothing(
    client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    """The scope-wide reads, asked for A's agent and user with B's key, are empty."""
    a = _make_world(client, session_factory)
    b_auth = {"Authorization": f"Bearer {new_key(session_factory)}"}
    scope = f"agentId={a.agent}&userId={a.user}"
    assert client.get(f"/agents-api/sessions?{scope}", headers=b_auth).json == {"sessions": []}
    assert client.get("/agents-api/scopes", headers=b_auth).json == {"scopes": []}
    assert client.get(f"/agents-api/facts?{scope}", headers=b_auth).json == {"facts": {}}
    history = f"/agents-api/facts/history?{scope}&key={a.fact_key}"
    assert client.get(history, headers=b_auth).json == {"history": [], "nextBefore": None}
    export = client.get(f"/agents-api/export?{scope}", headers=b_auth).text.splitlines()
    assert [json.loads(line)["type"] for line in export] == ["header"]
    assert a.secret not in client.get("/agents-api/export", headers=b_auth).text
    memory: Any = client.get(f"/agents-api/memory?{scope}", headers=b_auth).json
    assert memory["entries"] == [] and memory["tokens"] == 0
    usage: Any = client.get("/agents-api/usage", headers=b_auth).json
    assert (usage["llmCalls"], usage["promptTokens"], usage["byModel"]) == (0, 0, {})
    assert client.get("/agents-api/limits", headers=b_auth).json["tokensUsed"] == 0
    assert client.get("/agents-api/webhooks", headers=b_auth).json == {"webhooks": []}
    assert client.get("/agents-api/reevaluations", headers=b_auth).json == {"reevaluations": []}
    assert (client.get("/agents-api/provider", headers=b_auth).json or {})["source"] == "fleet"
    # ...while A, asking the same, sees its own.
    mine: Any = client.get(f"/agents-api/sessions?{scope}", headers=a.auth).json
    assert [s["id"] for s in mine["sessions"]] == [a.sid]
    assert client.get(f"/agents-api/facts?{scope}", headers=a.auth).json == {
        "facts": {a.fact_key: a.secret}
    }
    assert a.secret in client.get(f"/agents-api/export?{scope}", headers=a.auth).text
    own_history: Any = client.get(history, headers=a.auth).json
    assert [v["value"] for v in own_history["history"]] == [a.secret]
    assert client.get("/agents-api/limits", headers=a.auth).json["tokensUsed"] == 10
    own_usage: Any = client.get("/agents-api/usage", headers=a.auth).json
    assert list(own_usage["byModel"]) == [f"model-{a.secret}"]
    own_webhooks: Any = client.get("/agents-api/webhooks", headers=a.auth).json
    assert [w["id"] for w in own_webhooks["webhooks"]] == [a.webhook_id]
    own_provider = client.get("/agents-api/provider", headers=a.auth)
    assert (own_provider.json or {})["model"] == a.secret
    assert f"key-{a.secret}" not in own_provider.get_data(as_text=True)  # not even to A
    own_campaigns: Any = client.get("/agents-api/reevaluations", headers=a.auth).json
    assert [c["id"] for c in own_campaigns["reevaluations"]] == [a.reevaluation_id]
