"""Browser tests: Debian's headless Chromium, driven by Playwright, against the real app.

The app is served by a real HTTP server (werkzeug, in a thread) on the suite's
PostgreSQL and Redis, with the real Celery worker thread of tests/e2e consuming the
real broker. Playwright never downloads a browser: it launches /usr/bin/chromium.
Without Chromium (or Playwright) every test here is skipped with the reason.
"""

from __future__ import annotations

import io
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.serving import make_server

from shared.auth.service import org_for_key
from shared.facts.models import FactsDocument
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from tests.conftest import new_key
from tests.e2e.conftest import celery_app  # noqa: F401  (a fixture)
from tests.worker_thread import worker_thread

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = Path(os.environ.get("DRIFTLESS_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000


def _missing_browser() -> str | None:
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return (
            f"Chromium not found at {CHROMIUM}: "
            "`apt-get install -y chromium chromium-driver` to run the browser tests"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _missing_browser()
    if reason is None:
        return
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.skip(reason=reason))


# --- the live system ------------------------------------------------------------------


class TriggerLog:
    """WSGI middleware: records every `POST .../sessions/<sid>/evaluate` the server answered.

    Requests a page sends while it unloads (keepalive) never reach Playwright's request
    events, so the test asks the server what arrived. A trigger is recorded once its
    handler has run, so a test that waits for it knows the debounce has seen it.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._seen: list[tuple[str, str | None]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path: str = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") == "POST" and path.endswith("/evaluate"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length > 0 else b""
            environ["wsgi.input"] = io.BytesIO(body)
            try:
                trigger = json.loads(body).get("trigger")
            except (ValueError, AttributeError):
                trigger = None
            response = self.app(environ, start_response)
            with self._lock:
                self._seen.append((path.rstrip("/").split("/")[-2], trigger))
            return response
        return self.app(environ, start_response)

    def triggers(self, session_id: str) -> list[str | None]:
        with self._lock:
            return [trigger for sid, trigger in self._seen if sid == session_id]


class InFlight:
    """WSGI middleware: counts the responses not closed yet (the live event streams).

    A stream ends a few seconds after its browser went away (the server notices at its
    next ping, then sends the disconnect trigger); the server waits for that at teardown.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._open = 0
        self._changed = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        with self._changed:
            self._open += 1
        try:
            body = self.app(environ, start_response)
        except BaseException:
            self._closed()
            raise
        return _ClosingBody(body, self._closed)

    def _closed(self) -> None:
        with self._changed:
            self._open -= 1
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._open == 0, timeout)


class _ClosingBody:
    def __init__(self, body: Any, on_close: Any) -> None:
        self._body, self._on_close = body, on_close

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            if hasattr(self._body, "close"):
                self._body.close()
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()


@dataclass(frozen=True)
class LiveServer:
    url: str
    trigger_log: TriggerLog


@pytest.fixture(scope="module")
def celery_worker(celery_app: Celery) -> Iterator[Any]:  # noqa: F811
    """The real worker thread, as in tests/e2e, but stopped when this module ends
    (two alive at once in one process break each other: see worker_thread)."""
    with worker_thread(celery_app) as worker:
        yield worker


@pytest.fixture(scope="module")
def live_server(settings: Settings, celery_worker: Any) -> Iterator[LiveServer]:
    """The real Flask app behind a real HTTP server (werkzeug, threaded)."""
    from web.app import create_app

    app = create_app(settings)
    trigger_log = TriggerLog(app.wsgi_app)
    in_flight = InFlight(trigger_log)
    app.wsgi_app = in_flight  # type: ignore[method-assign]
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="console-http", daemon=True)
    thread.start()
    try:
        yield LiveServer(f"http://127.0.0.1:{server.server_port}", trigger_log)
    finally:
        in_flight.wait_idle(timeout=20)  # the last page's event stream winds down
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
        runtime = app.extensions["driftless"]
        runtime.redis.close()
        runtime.engine.dispose()


class Api:
    """The HTTP API of the live server, as any client sees it (never through a proxy)."""

    def __init__(self, base_url: str, key: str) -> None:
        self.base_url, self.key = base_url, key
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __call__(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.base_url}/agents-api{path}", data=data, method=method
        )
        request.add_header("Authorization", f"Bearer {self.key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=15) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            error.close()
            raise AssertionError(f"{method} {path} → {error.code} {detail}") from None
        return json.loads(raw) if raw else None


@pytest.fixture
def console_key(committed_factory: sessionmaker[Session]) -> Iterator[str]:
    """An API key of a fresh org: each test sees only its own sessions."""
    key = new_key(committed_factory)
    yield key
    # The data is committed; facts documents are counted table-wide by other tests.
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        org_id = org_for_key(uow=uow, key=key)
        uow.session.execute(delete(FactsDocument).where(FactsDocument.org_id == org_id))
        uow.commit()


@pytest.fixture
def api(live_server: LiveServer, console_key: str) -> Api:
    return Api(live_server.url, console_key)


# --- the browser ----------------------------------------------------------------------


# Module scope, not session: Playwright's sync API keeps an asyncio loop marked running
# in this thread until it stops, and later tests (the MCP client's anyio.run) need none.
@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as driver:
        yield driver


@pytest.fixture
def browser(playwright_driver: Any, tmp_path: Path) -> Iterator[Any]:
    """A Chromium of its own per test: a fresh user data dir, closed afterwards."""
    context = playwright_driver.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1280, "height": 900},
    )
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def js_errors() -> list[str]:
    """Uncaught errors of the page's JavaScript."""
    return []


def _is_csp_violation(text: str) -> bool:
    # Chromium's console line for what the policy blocked: "Refused to …" in older
    # versions, "… violates the following Content Security Policy directive …" now.
    return text.startswith("Refused to") or "Content Security Policy" in text


@pytest.fixture
def page(browser: Any, js_errors: list[str]) -> Iterator[Any]:
    """The test's page; at the end, no request or script of it was blocked by the CSP
    (a policy that silently blocks the console's own code breaks it without an error)."""
    page = browser.pages[0] if browser.pages else browser.new_page()
    page.on("pageerror", lambda error: js_errors.append(str(error)))
    violations: list[str] = []

    def on_console(message: Any) -> None:
        if _is_csp_violation(message.text):
            violations.append(message.text)

    page.on("console", on_console)
    yield page
    assert violations == [], f"the Content-Security-Policy blocked: {violations}"


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
