"""schemathesis over /agents-api/openapi.json with a valid key: no request answers 5xx.

The document is read from the app itself at import (no database needed for that), so a
new route is fuzzed without touching this file. The requests go to a real app on the
test PostgreSQL and Redis with committed data: hypothesis runs many examples per test,
so the per-test savepoint of the other tests does not fit. Generated path and query
parameters are, half the time, swapped for ids of a seeded session, topic, agent and
user, and most tool calls name a real tool with arguments of its shape, so the fuzzing
reaches the services behind the 404s and 422s instead of stopping at them. The org has
LLM calls in its usage ledger too, so GET /usage adds up real rows.

Checks: no 5xx, every status documented, content types and bodies as documented.
`DRIFTLESS_FUZZ_EXAMPLES` (default 30 per operation and phase) runs a longer campaign;
`DRIFTLESS_FUZZ_SEED` picks another fixed seed, or `random` a new one each run. The
default seed is fixed so that CI answers the same way twice (hypothesis's advice for CI):
with a random one, an operation reached only a few times could miss every 2xx by chance.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from flask.testing import FlaskClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Ok
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.infra.config import Settings
from shared.infra.db.engine import make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.base import LLMCall, Usage
from shared.usage.service import record_llm_usage
from shared.webhooks.events import EVENT_TYPES
from tests.conftest import new_key
from tests.faults.conftest import report
from tests.helpers import new_session, post_message
from tests.integration.portability.export_file import export_lines
from web.app import create_app

# Examples per operation and generation mode; the whole file stays around a minute.
MAX_EXAMPLES = int(os.environ.get("DRIFTLESS_FUZZ_EXAMPLES", "30"))
SEED = os.environ.get("DRIFTLESS_FUZZ_SEED", "1202")
# Server-Sent Events never end: a stream is read up to its first event (`ready`), then
# closed, which is the client going away (the disconnect trigger runs, as in production).
STREAM_EVENTS = 1
STREAM_TIMEOUT_S = 5

# Ids of the seeded resources by parameter name, filled by the `world` fixture before the
# first example is drawn (strategies read it lazily).
SEEDED: dict[str, list[str]] = {}
# Statuses answered, by operation: proof the examples got past the 404s and 422s.
ANSWERED: defaultdict[str, Counter[int]] = defaultdict(Counter)


def _document_app() -> Any:
    """An app that only serves its OpenAPI document: it never reaches a database."""
    unused = Settings(
        database_url="postgresql://unused@127.0.0.1:1/unused",
        redis_url="redis://127.0.0.1:1/0",
        broker_url="redis://127.0.0.1:1/0",
        llm="local",
    )
    return create_app(unused, queue=RecordingQueue())


schema = schemathesis.openapi.from_wsgi(
    "/agents-api/openapi.json",
    _document_app(),
    config=schemathesis.Config.from_dict(
        # The key is ours, set on every call: no generated or removed Authorization.
        {
            **({} if SEED == "random" else {"seed": int(SEED)}),
            "generation": {"max-examples": MAX_EXAMPLES, "with-security-parameters": False},
            "max-stream-events": STREAM_EVENTS,
            "request-timeout": STREAM_TIMEOUT_S,
        }
    ),
).include(path_regex=r"^/agents-api/")


@dataclass(frozen=True)
class World:
    """The app on the test database and the key of the org that owns the seeded data."""

    app: Any
    auth: dict[str, str]


def _seed(client: FlaskClient, auth: dict[str, str]) -> dict[str, list[str]]:
    """A session with messages, notes, facts, a promoted closed topic and an active one,
    a re-evaluation of them, and a webhook subscription with a delivery."""
    client.put("/agents-api/agents/planner", json={"soul": "plans things"}, headers=auth)
    session = new_session(client, auth, agent="planner", user="ada")
    sid, first = session["id"], session["activeTopicId"]
    for n in range(6):
        role = "user" if n % 2 == 0 else "assistant"
        post_message(client, auth, sid, f"message {n}: we ship on Friday", role)
    client.post(
        f"/agents-api/sessions/{sid}/tools/notes",
        json={"arguments": {"op": "$set", "content": "deadline Friday"}},
        headers=auth,
    )
    client.put("/agents-api/facts?agentId=planner&userId=ada", json={"day": "Fri"}, headers=auth)
    client.put(f"/agents-api/topics/{first}/memory", json={"state": "promoted"}, headers=auth)
    second: Any = client.post(f"/agents-api/sessions/{sid}/topics", json={}, headers=auth).json
    topics = [first, second["id"]]
    reevaluation: Any = client.post("/agents-api/reevaluations", json={}, headers=auth).json
    # Subscriptions (on a public address: private ones are refused), one with a delivery;
    # the spare ones are there for DELETE to remove.
    webhook = {"url": "http://8.8.8.8/hooks", "events": ["facts.changed"]}
    webhook_ids = [
        client.post("/agents-api/webhooks", json=webhook, headers=auth).json["id"]  # type: ignore[index]
        for _ in range(4)
    ]
    client.put("/agents-api/facts?agentId=planner&userId=ada", json={"day": "Sat"}, headers=auth)
    return {
        # path parameters
        "sid": [sid],
        "tid": topics,
        "agent_id": ["planner"],
        "user_id": ["ada"],
        "key": ["day"],
        "name": ["notes", "important_info", "manage_topic_memory"],
        "reevaluation_id": [reevaluation["id"]],
        "webhook_id": webhook_ids[:1],
        "spare_webhook_id": webhook_ids[1:],
        # query parameters
        "agentId": ["planner"],
        "userId": ["ada"],
        "topicId": topics,
    }


def _seed_usage(factory: sessionmaker[Session], key: str) -> None:
    """Two LLM calls of the org, one failed, for GET /usage to add up (a worker's rows)."""
    with UnitOfWork(factory, RecordingQueue()) as uow:
        org_id = org_for_key(uow=uow, key=key)
        assert org_id is not None
        for failed, usage in ((False, Usage(120, 17)), (True, Usage())):
            call = LLMCall(
                org_id, model="fuzz-model", purpose="summarize", failed=failed, usage=usage
            )
            record_llm_usage(uow=uow, org_id=org_id, call=call)
        uow.commit()


@pytest.fixture(scope="module")
def world(settings: Settings, engine: Engine) -> Iterator[World]:
    factory = make_session_factory(engine)
    key = new_key(factory)
    auth = {"Authorization": f"Bearer {key}"}
    app = create_app(settings, queue=RecordingQueue(), session_factory=factory)
    SEEDED.update(_seed(app.test_client(), auth))
    _seed_usage(factory, key)
    yield World(app=app, auth=auth)
    SEEDED.clear()


def _seeded(name: str) -> st.SearchStrategy[str]:
    return st.deferred(lambda: st.sampled_from(SEEDED[name]))


def _half_seeded(strategy: st.SearchStrategy[Any], skip: frozenset[str] = frozenset()) -> Any:
    """Half the examples get seeded ids in place of every generated value we hold one for."""

    @st.composite
    def swapped(draw: st.DrawFn) -> Any:
        values = draw(strategy)
        if not isinstance(values, dict):
            return values
        return {
            name: draw(_seeded(name)) if name in SEEDED and name not in skip else value
            for name, value in values.items()
        }

    return st.one_of(strategy, swapped())


@schema.hook
def before_generate_path_parameters(context: Any, strategy: Any) -> Any:
    # Erasing the seeded user would leave every later operation with nothing to find.
    if context.operation.path.endswith("/users/{user_id}"):
        return _half_seeded(strategy, skip=frozenset({"user_id"}))
    if context.operation.path.endswith("/webhooks/{webhook_id}"):  # DELETE
        # The seeded subscription stays, for its deliveries list: DELETE gets spare ones.
        spare = st.fixed_dictionaries({"webhook_id": _seeded("spare_webhook_id")})
        return st.one_of(strategy, spare)
    return _half_seeded(strategy)


@schema.hook
def before_generate_query(context: Any, strategy: Any) -> Any:
    return _half_seeded(strategy)


def _tool_calls() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """A built-in tool's name with arguments of its shape (GET /tools), values fuzzed."""
    text = st.text(max_size=40)
    key = st.text(min_size=1, max_size=40)
    topic_id = st.one_of(_seeded("topicId"), st.uuids().map(str), text)
    value = st.one_of(text, st.integers(), st.booleans(), st.none(), st.lists(text, max_size=3))
    notes = st.one_of(
        st.fixed_dictionaries({"op": st.sampled_from(["$set", "update"]), "content": text}),
        st.fixed_dictionaries({"op": st.just("read")}, optional={"topicId": topic_id}),
    )
    important_info = st.one_of(
        st.fixed_dictionaries({"op": st.just("$set"), "key": key, "value": value}),
        st.fixed_dictionaries({"op": st.just("read")}, optional={"key": key}),
        st.fixed_dictionaries({"op": st.just("$unset"), "key": key}),
    )
    manage_topic_memory = st.fixed_dictionaries(
        {"action": st.sampled_from(["promote", "demote", "deprecate"]), "topicId": topic_id}
    )
    return st.one_of(
        st.tuples(st.just("notes"), notes),
        st.tuples(st.just("important_info"), important_info),
        st.tuples(st.just("manage_topic_memory"), manage_topic_memory),
    )


@schema.hook
def flatmap_case(context: Any, case: Any) -> Any:
    """Make cross-field sense of some cases, which the schema alone cannot express."""
    path = context.operation.path
    if path.endswith("/tools/{name}"):
        return st.one_of(st.just(case), _coherent_tool_call(case), _coherent_tool_call(case))
    if path.endswith("/messages") and context.operation.method.upper() == "POST":
        return st.one_of(st.just(case), _coherent_message(case))
    if path.endswith("/webhooks") and context.operation.method.upper() == "POST":
        return st.one_of(st.just(case), _coherent_subscription(case))
    if path.endswith("/provider") and context.operation.method.upper() == "PUT":
        return st.one_of(st.just(case), _coherent_provider(case))
    if path.endswith("/import"):
        return st.one_of(st.just(case), _coherent_import(case))
    return st.just(case)


@schemathesis.serializer("application/x-ndjson")
def _ndjson(context: Any, value: Any) -> bytes:
    """POST /import's streamed body: text as it is (lone surrogates too, as raw bytes a
    client could send), anything else as one JSON line."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", errors="surrogatepass")
    return json.dumps(value).encode()


@st.composite
def _coherent_import(draw: st.DrawFn, case: Any) -> Any:
    """An export of fresh sessions with one of its lines perhaps fuzzed: generated text
    is almost never a header line, so the importer's later lines would go unreached."""
    lines = export_lines(sessions=1, messages=draw(st.integers(1, 6)))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(lines) - 1))
        lines[at] = draw(st.one_of(st.text(max_size=80), st.just(lines[at][: len(lines[at]) // 2])))
    case.query = {}
    case.body = "\n".join(lines)
    return case


@st.composite
def _coherent_tool_call(draw: st.DrawFn, case: Any) -> Any:
    """A seeded session, a real tool and arguments of its shape: path and body drawn
    apart would almost never agree."""
    name, arguments = draw(_tool_calls())
    case.path_parameters = {"sid": draw(_seeded("sid")), "name": name}
    case.body = {"arguments": arguments}
    return case


@st.composite
def _coherent_message(draw: st.DrawFn, case: Any) -> Any:
    """A seeded session, and tool fields only on a tool message: the generated bodies
    break that rule (a 422) as often as not."""
    case.path_parameters = {"sid": draw(_seeded("sid"))}
    if isinstance(case.body, dict) and case.body.get("role") != "tool":
        case.body = {k: v for k, v in case.body.items() if k not in ("toolName", "toolCallId")}
    return case


@st.composite
def _coherent_subscription(draw: st.DrawFn, case: Any) -> Any:
    """A URL on a public address with a fuzzed path, and known event types: a generated
    string is almost never a URL the service may deliver to."""
    path = draw(st.text(alphabet=st.characters(codec="ascii", categories=["L", "N"]), max_size=30))
    types = st.sampled_from(list(EVENT_TYPES))
    events = draw(st.lists(types, min_size=1, max_size=len(EVENT_TYPES)))
    case.body = {"url": f"https://8.8.8.8/{path}", "events": events}
    return case


@st.composite
def _coherent_provider(draw: st.DrawFn, case: Any) -> Any:
    """A model server on a public address (or the fleet's) and a key and model name of one
    word: generated strings are almost never all three."""
    letters = st.characters(codec="ascii", categories=["L", "N"])
    word = st.text(alphabet=letters, min_size=1, max_size=40)
    body = {"apiKey": draw(word), "model": draw(word)}
    if draw(st.booleans()):
        body["baseUrl"] = f"https://8.8.8.8/{draw(word)}"
    case.body = body
    return case


@schema.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    if case.method.upper() == case.operation.method.upper():  # not a 405 probe
        ANSWERED[case.operation.label][response.status_code] += 1


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_generated_request_is_a_server_error(case: Any, world: World) -> None:
    response = case.call_and_validate(
        app=world.app,
        headers=world.auth,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
    # The key is valid on every call: a 401 would mean only the auth layer was fuzzed.
    assert response.status_code != 401, response.text


def test_every_api_route_is_fuzzed() -> None:
    """The fuzzed operations are the app's own routes, so a new route is never missed."""
    app = _document_app()
    routes = {
        (method, rule.rule.replace("<", "{").replace(">", "}"))
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/agents-api/") and rule.rule != "/agents-api/openapi.json"
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    results = list(schema.get_all_operations())
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) == len(results)  # else schemathesis could not read some operation
    fuzzed = {(operation.method.upper(), operation.path) for operation in operations}
    assert fuzzed == routes


def test_the_fuzzing_reached_every_operations_resources() -> None:
    """Each operation answered a 2xx at least once: its service ran on real rows."""
    if not ANSWERED:
        pytest.skip("runs after test_no_generated_request_is_a_server_error")
    requests = sum(sum(statuses.values()) for statuses in ANSWERED.values())
    errors = sum(n for statuses in ANSWERED.values() for s, n in statuses.items() if s >= 500)
    ok = {
        op: sum(n for s, n in statuses.items() if 200 <= s < 300)
        for op, statuses in ANSWERED.items()
    }
    fewest = min(ok, key=ok.__getitem__)
    report(
        f"schemathesis: {requests} requests over {len(ANSWERED)} operations, {errors} 5xx;"
        f" fewest 2xx: {ok[fewest]} of {sum(ANSWERED[fewest].values())} ({fewest})"
    )
    never = [op for op, statuses in ANSWERED.items() if not any(200 <= s < 300 for s in statuses)]
    assert never == [], {op: dict(ANSWERED[op]) for op in never}
