"""The client's retry policy and error parsing, against tiny real HTTP servers (stdlib
`http.server` in a thread) that answer what each test scripts and count what they got.

429 and 503 are retried, honouring Retry-After, and then the answer is the client's;
a broken connection is retried for a GET but never for a POST (it may have been
applied). No test measures time: the servers say `Retry-After: 0` and the backoff is
made tiny.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from driftless_client import ApiError, AsyncClient, Client, __version__
from driftless_client._retry import RetryPolicy, parse_retry_after

API_KEY = "test-key"


@dataclass
class Answer:
    status: int
    body: Any = None  # JSON; a str is sent as text/html
    headers: dict[str, str] = field(default_factory=dict)
    hang_up: bool = False  # close the connection without answering


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class ScriptedServer:
    """Answers requests with `script` in order (the last one again once it runs out)."""

    def __init__(self, script: list[Answer]) -> None:
        self.script = script
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _next(self, request: Request) -> Answer:
        with self._lock:
            self.requests.append(request)
            return self.script[min(len(self.requests), len(self.script)) - 1]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer = server._next(Request(self.command, self.path, headers, body))
                if answer.hang_up:
                    self.close_connection = True
                    return
                if isinstance(answer.body, str):
                    content, kind = answer.body.encode(), "text/html"
                else:
                    content, kind = json.dumps(answer.body).encode(), "application/json"
                self.send_response(answer.status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(content)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def unavailable(retry_after: str | None = "0") -> Answer:
    body = {"error": {"code": "unavailable", "message": "the database is unavailable"}}
    return Answer(503, body, {"Retry-After": retry_after} if retry_after is not None else {})


def limited() -> Answer:
    body = {"error": {"code": "rate_limited", "message": "too many streams"}}
    return Answer(429, body, {"Retry-After": "0"})


SESSION = {"id": "s-1", "agentId": "a", "userId": "u"}


@pytest.fixture
def flaky() -> Iterator[ScriptedServer]:
    """503, 503 (each with Retry-After: 0), then 200."""
    with ScriptedServer([unavailable(), unavailable(), Answer(200, SESSION)]) as server:
        yield server


def test_503_twice_with_retry_after_is_retried_and_the_third_answer_is_returned(
    flaky: ScriptedServer,
) -> None:
    with Client(flaky.url, API_KEY) as client:
        assert client.session("s-1") == SESSION
    assert [(r.method, r.path) for r in flaky.requests] == [("GET", "/agents-api/sessions/s-1")] * 3


def test_a_post_answered_429_then_503_is_sent_again_with_the_same_body() -> None:
    script = [limited(), unavailable(), Answer(201, SESSION)]
    with ScriptedServer(script) as server, Client(server.url, API_KEY) as client:
        assert client.create_session("a", "u") == SESSION
    assert len(server.requests) == 3
    # One body, byte for byte, three times (httpx 0.27 writes its JSON with spaces, 0.28 without).
    (body,) = {r.body for r in server.requests}
    assert json.loads(body) == {"agentId": "a", "userId": "u"}


@pytest.mark.anyio
async def test_the_async_client_retries_503_with_retry_after_too(flaky: ScriptedServer) -> None:
    async with AsyncClient(flaky.url, API_KEY) as client:
        assert await client.session("s-1") == SESSION
    assert len(flaky.requests) == 3


def test_503_without_retry_after_is_retried_after_a_backoff() -> None:
    script = [unavailable(retry_after=None), Answer(200, SESSION)]
    with (
        ScriptedServer(script) as server,
        Client(server.url, API_KEY, backoff=0.001) as client,
    ):
        assert client.session("s-1") == SESSION
    assert len(server.requests) == 2


def test_when_the_retries_run_out_the_last_answer_raises_api_error() -> None:
    with (
        ScriptedServer([unavailable()]) as server,
        Client(server.url, API_KEY, max_retries=2) as client,
        pytest.raises(ApiError) as error,
    ):
        client.scopes()
    assert (error.value.status, error.value.code) == (503, "unavailable")
    assert error.value.message == "the database is unavailable"
    assert len(server.requests) == 3  # the first and 2 retries


def test_other_errors_are_not_retried() -> None:
    body = {"error": {"code": "conflict", "message": "a concurrent change"}}
    with (
        ScriptedServer([Answer(409, body)]) as server,
        Client(server.url, API_KEY) as client,
        pytest.raises(ApiError) as error,
    ):
        client.set_memory_state("t-1", "promoted")
    assert (error.value.status, error.value.code) == (409, "conflict")
    assert len(server.requests) == 1


def test_a_post_is_not_retried_after_its_connection_broke() -> None:
    with (
        ScriptedServer([Answer(0, hang_up=True)]) as server,
        Client(server.url, API_KEY, backoff=0.001) as client,
        pytest.raises(httpx.TransportError),
    ):
        client.post_messages("s-1", {"role": "user", "content": "hi"})
    assert len(server.requests) == 1


def test_a_get_is_retried_after_its_connection_broke() -> None:
    with (
        ScriptedServer([Answer(0, hang_up=True), Answer(200, SESSION)]) as server,
        Client(server.url, API_KEY, backoff=0.001) as client,
    ):
        assert client.session("s-1") == SESSION
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_the_async_client_does_not_retry_a_post_whose_connection_broke() -> None:
    with ScriptedServer([Answer(0, hang_up=True)]) as server:
        async with AsyncClient(server.url, API_KEY, backoff=0.001) as client:
            with pytest.raises(httpx.TransportError):
                await client.evaluate("s-1", "manual")
    assert len(server.requests) == 1


def test_an_answer_not_in_the_apis_error_shape_falls_back_to_the_status_text() -> None:
    with (
        ScriptedServer([Answer(502, "<html>upstream down</html>")]) as server,
        Client(server.url, API_KEY) as client,
        pytest.raises(ApiError) as error,
    ):
        client.scopes()
    assert (error.value.status, error.value.code) == (502, "bad_gateway")
    assert error.value.message == "Bad Gateway: <html>upstream down</html>"


def test_requests_carry_the_bearer_key_the_user_agent_and_encoded_ids() -> None:
    with (
        ScriptedServer([Answer(200, {"facts": {}})]) as server,
        Client(server.url + "/", API_KEY) as client,
    ):
        client.delete_fact("a:{b} c/é", "u 1", "k/1")
    (request,) = server.requests
    assert request.method == "DELETE"
    path, _, query = request.path.partition("?")
    assert path == "/agents-api/facts/k%2F1"
    # Every reserved character percent-encoded (a space is `+` or `%20`, by httpx's version).
    assert query.replace("%20", "+") == "agentId=a%3A%7Bb%7D+c%2F%C3%A9&userId=u+1"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["user-agent"] == f"driftless-client/{__version__}"


def test_a_base_url_with_a_path_prefix_keeps_it() -> None:
    with (
        ScriptedServer([Answer(200, {"scopes": []})]) as server,
        Client(server.url + "/driftless/", API_KEY) as client,
    ):
        assert client.scopes() == {"scopes": []}
    assert server.requests[0].path == "/driftless/agents-api/scopes"


def test_retry_after_is_read_as_seconds_or_an_http_date_and_capped() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after(format_datetime(datetime.now(UTC) - timedelta(hours=1))) == 0.0
    in_a_minute = parse_retry_after(format_datetime(datetime.now(UTC) + timedelta(minutes=1)))
    assert in_a_minute is not None and 0 < in_a_minute <= 60

    policy = RetryPolicy(max_retries=3)
    answer = httpx.Response(429, headers={"Retry-After": "3600"})
    assert policy.after_response(0, answer) == policy.max_retry_after_s
    assert policy.after_response(3, answer) is None  # the retries are spent
    assert policy.after_response(0, httpx.Response(500)) is None


def test_the_backoff_is_full_jitter_doubling_from_half_a_second() -> None:
    policy = RetryPolicy()
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (10, 30.0)]:
        waits = [policy.backoff(attempt) for _ in range(200)]
        assert all(0.0 <= w <= ceiling for w in waits)
        assert max(waits) > ceiling / 2  # not a fixed wait


def test_only_transient_errors_of_idempotent_methods_are_retried() -> None:
    policy = RetryPolicy(max_retries=1)
    reset = httpx.ReadError("connection reset")
    assert policy.after_error(0, "GET", reset) is not None
    assert policy.after_error(0, "PUT", httpx.ReadTimeout("slow")) is not None
    assert policy.after_error(0, "DELETE", reset) is not None
    assert policy.after_error(0, "POST", reset) is None
    assert policy.after_error(1, "GET", reset) is None
    assert policy.after_error(0, "GET", httpx.UnsupportedProtocol("ftp://")) is None
