"""Structured logs: a request's log lines carry its request id (echoed in X-Request-Id)
and the topic id of its route, as JSON or as text."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.infra import logcontext
from shared.infra.config import Settings
from shared.infra.logs import LogFormat, configure_logging
from shared.infra.queue import Job
from tests.helpers import new_session


class BrokenQueue:
    """A broker that refuses every job: the unit of work logs the loss after its commit."""

    def send(self, job: Job) -> None:
        raise ConnectionError("broker down")


@pytest.fixture
def capture_logs() -> Iterator[Callable[[LogFormat], io.StringIO]]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    installed: list[logging.Handler] = []

    def install(log_format: LogFormat) -> io.StringIO:
        stream = io.StringIO()
        installed.append(configure_logging(log_format, stream=stream))
        return stream

    yield install
    for handler in installed:
        root.removeHandler(handler)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def broken_client(settings: Settings, session_factory: sessionmaker[Session]) -> FlaskClient:
    from web.app import create_app

    client: FlaskClient = create_app(
        settings, queue=BrokenQueue(), session_factory=session_factory
    ).test_client()
    return client


def lost_job_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in lines if line["message"].startswith("could not send")]


def test_a_request_log_line_is_json_with_the_request_and_topic_ids(
    broken_client: FlaskClient, auth: dict[str, str], capture_logs: Any
) -> None:
    tid = new_session(broken_client, auth)["activeTopicId"]
    stream = capture_logs("json")
    response = broken_client.put(
        f"/agents-api/topics/{tid}/memory",
        json={"state": "promoted"},
        headers={**auth, "X-Request-Id": "agent-run-42.7"},
    )
    assert response.status_code == 200  # the job's loss is logged, not the caller's problem
    assert response.headers["X-Request-Id"] == "agent-run-42.7"
    [line] = lost_job_lines(stream)
    assert line["request_id"] == "agent-run-42.7"
    assert line["topic_id"] == tid
    assert (line["level"], line["logger"]) == ("ERROR", "shared.infra.db.uow")
    assert "ConnectionError: broker down" in line["exc_info"] and line["timestamp"]
    assert logcontext.current() == {}  # nothing outlives the request


def test_without_a_usable_request_id_the_web_makes_one(
    broken_client: FlaskClient, auth: dict[str, str], capture_logs: Any
) -> None:
    tid = new_session(broken_client, auth)["activeTopicId"]
    stream = capture_logs("json")
    ids: list[str] = []
    for header in ({}, {"X-Request-Id": "no spaces allowed"}, {"X-Request-Id": "x" * 129}):
        response = broken_client.put(
            f"/agents-api/topics/{tid}/memory",
            json={"state": "promoted" if len(ids) % 2 == 0 else "none"},
            headers={**auth, **header},
        )
        ids.append(response.headers["X-Request-Id"])
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids) and len(set(ids)) == 3
    assert [line["request_id"] for line in lost_job_lines(stream)] == ids


def test_every_answer_carries_a_request_id_even_a_refusal(client: FlaskClient) -> None:
    response = client.get("/agents-api/sessions")  # no key
    assert response.status_code == 401
    assert len(response.headers["X-Request-Id"]) == 32


def test_text_format_appends_the_bound_ids(
    broken_client: FlaskClient, auth: dict[str, str], capture_logs: Any
) -> None:
    tid = new_session(broken_client, auth)["activeTopicId"]
    stream = capture_logs("text")
    broken_client.put(
        f"/agents-api/topics/{tid}/memory",
        json={"state": "promoted"},
        headers={**auth, "X-Request-Id": "r-1"},
    )
    [line] = [line for line in stream.getvalue().splitlines() if "could not send" in line]
    assert line.endswith(f"[request_id=r-1 topic_id={tid}]")
    assert " ERROR shared.infra.db.uow: could not send " in line


def test_configuring_twice_replaces_the_handler(capture_logs: Any) -> None:
    first, second = capture_logs("json"), capture_logs("json")
    logging.getLogger("probe").warning("once")
    assert first.getvalue() == "" and json.loads(second.getvalue())["message"] == "once"


def access_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == "web.access"]


def test_each_request_logs_one_access_line_with_its_id(
    client: FlaskClient, auth: dict[str, str], capture_logs: Any
) -> None:
    stream = capture_logs("json")
    response = client.get(
        "/agents-api/sessions?agentId=support-bot&userId=alice",
        headers={**auth, "X-Request-Id": "r-7"},
    )
    assert response.status_code == 200
    [line] = access_lines(stream)
    method, target, status, milliseconds, unit = line["message"].split(" ")
    assert (method, status, unit, line["level"]) == ("GET", "200", "ms", "INFO")
    # The query's names, never its values: a value may be a secret or someone's words.
    assert target == "/agents-api/sessions?agentId&userId"
    assert float(milliseconds) >= 0 and line["request_id"] == "r-7"
    assert auth["Authorization"].split()[-1] not in stream.getvalue()


def test_a_refused_request_is_logged_too(client: FlaskClient, capture_logs: Any) -> None:
    stream = capture_logs("text")
    assert client.get("/agents-api/sessions").status_code == 401  # no key
    [line] = [line for line in stream.getvalue().splitlines() if " web.access: " in line]
    assert " INFO web.access: GET /agents-api/sessions 401 " in line


def test_a_probe_that_succeeds_is_logged_at_debug_only(
    client: FlaskClient, capture_logs: Any
) -> None:
    stream = capture_logs("json")
    assert client.get("/healthz").status_code == 200
    assert access_lines(stream) == []
    logging.getLogger().setLevel(logging.DEBUG)
    client.get("/healthz")
    [line] = access_lines(stream)
    assert line["level"] == "DEBUG" and line["message"].startswith("GET /healthz 200 ")
