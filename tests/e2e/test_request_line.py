"""Every valid id is servable through the real server: a user whose agentId, userId and
facts key are as long as allowed, in 4-byte characters, is written, read and erased.

gunicorn refuses a request line past `--limit-request-line` (its default 4094 bytes)
with an HTML 414 before the app sees it; percent-encoded, each of those characters is
12 bytes, and two ids in a query already pass 4094. The web runs two ways, the
Procfile's (and deploy/'s, held to it) and `driftless up`'s: both are started here.
"""

from __future__ import annotations

import http.client
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from sqlalchemy.orm import Session, sessionmaker

from shared.domain.limits import MAX_FACT_KEY_CHARS, MAX_SCOPE_ID_CHARS
from shared.infra.config import Settings
from shared.search.service import MAX_QUERY_CHARS
from tests.conftest import new_key
from tests.faults.procs import BIN, Processes, _answers_http, driftless_env, free_port
from worker.supervisor import _commands

ROOT = Path(__file__).resolve().parents[2]
# Four UTF-8 bytes each, so twelve once percent-encoded: the longest ids there are.
AGENT = "\U0001d11e" * MAX_SCOPE_ID_CHARS  # MUSICAL SYMBOL G CLEF
USER = "\U0001f600" * MAX_SCOPE_ID_CHARS
KEY = "\U0001f004" * MAX_FACT_KEY_CHARS
GUNICORN_DEFAULT_LIMIT = 4094


def _procfile_web(port: int) -> list[str]:
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.startswith("web:"):
            argv = shlex.split(line.removeprefix("web:"))
            break
    argv[0] = str(BIN / argv[0])
    argv[argv.index("--bind") + 1] = f"127.0.0.1:{port}"
    argv[argv.index("--workers") + 1] = "1"  # one is enough to serve; the rest is as run
    return argv


def _up_web(settings: Settings, port: int) -> list[str]:
    argv = _commands(settings.model_copy(update={"port": port}))["web"]
    argv[argv.index("--workers") + 1] = "1"
    return argv


class Api:
    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.key = key
        self.longest_line = 0

    def call(self, method: str, path: str, body: Any = None, **query: str) -> tuple[int, Any]:
        target = path + (f"?{urlencode(query, quote_via=quote, safe='')}" if query else "")
        self.longest_line = max(self.longest_line, len(f"{method} {target} HTTP/1.1"))
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            headers = {"Authorization": f"Bearer {self.key}"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            connection.request(
                method, target, json.dumps(body) if body is not None else None, headers
            )
            response = connection.getresponse()
            raw = response.read()
            type_ = response.getheader("Content-Type", "")
            return response.status, json.loads(raw) if "json" in type_ else raw
        finally:
            connection.close()


@pytest.fixture(params=["Procfile", "driftless up"])
def api(
    request: pytest.FixtureRequest,
    settings: Settings,
    database_url: str,
    redis_url: str,
    broker_url: str,
    committed_factory: sessionmaker[Session],
    tmp_path: Path,
) -> Iterator[Api]:
    port = free_port()
    argv = _procfile_web(port) if request.param == "Procfile" else _up_web(settings, port)
    env = driftless_env(
        DATABASE_URL=database_url, REDIS_URL=redis_url, CELERY_BROKER_URL=broker_url
    )
    processes = Processes(tmp_path)
    try:
        processes.spawn("web", argv, env, ready=lambda _: _answers_http(port)).wait_ready()
        yield Api(port, new_key(committed_factory))
    finally:
        processes.close()


def test_a_user_with_the_longest_ids_is_written_read_and_erased(api: Api) -> None:
    agent, user, key = (quote(part, safe="") for part in (AGENT, USER, KEY))
    scope = {"agentId": AGENT, "userId": USER}

    assert api.call("PUT", f"/agents-api/agents/{agent}", {"soul": "s"})[0] == 200
    status, profile = api.call("GET", f"/agents-api/agents/{agent}")
    assert (status, profile["agentId"]) == (200, AGENT)
    status, session = api.call("POST", "/agents-api/sessions", scope)
    assert status == 201, session
    assert api.call("PUT", "/agents-api/facts", {KEY: 1}, **scope) == (200, {"facts": {KEY: 1}})
    status, sessions = api.call("GET", "/agents-api/sessions", **scope)
    assert (status, [s["id"] for s in sessions["sessions"]]) == (200, [session["id"]])
    assert api.call("GET", "/agents-api/facts", **scope) == (200, {"facts": {KEY: 1}})
    assert api.call("GET", "/agents-api/memory", **scope)[0] == 200
    assert api.call("GET", "/agents-api/search", q="hello", **scope)[0] == 200
    assert api.call("DELETE", f"/agents-api/facts/{key}", **scope)[0] == 204
    status, history = api.call("GET", "/agents-api/facts/history", key=KEY, **scope)
    assert (status, [v["removedBy"] for v in history["history"]]) == (200, ["user"])

    status, erased = api.call("DELETE", f"/agents-api/agents/{agent}/users/{user}")

    assert status == 200, erased
    assert erased["erased"]["sessions"] == 1
    assert api.call("GET", "/agents-api/sessions", **scope) == (200, {"sessions": []})
    # GET /facts/history with both ids and the key: the Procfile's 7,260 bytes, past
    # gunicorn's default.
    assert api.longest_line == 7260 > GUNICORN_DEFAULT_LIMIT


def test_a_path_that_is_not_utf8_is_a_json_400_naming_it(api: Api) -> None:
    for segment in ("%FF", "%FE"):
        status, body = api.call("PUT", f"/agents-api/agents/{segment}", {"soul": segment})

        assert status == 400, body
        assert f"/agents-api/agents/{segment}" in body["error"]["message"]


def test_a_search_text_of_the_documented_length_is_searched_by_post_41(api: Api) -> None:
    """1,000 CJK characters (the most `q` may hold) are 9,000 bytes percent-encoded: past
    any request line gunicorn serves, so GET is a 414 before the app sees it. POST takes
    the same parameters as a JSON body."""
    scope = {"agentId": "agent-cjk", "userId": "user-cjk"}
    q = "記" * MAX_QUERY_CHARS

    assert api.call("GET", "/agents-api/search", q=q, **scope)[0] == 414
    status, found = api.call("POST", "/agents-api/search", {**scope, "q": q})

    assert (status, found["results"]) == (200, [])
