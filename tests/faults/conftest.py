"""Fixtures of the fault suite: processes we can kill, servers of our own, counts to quote.

The process faults run the real entry points as subprocesses (`celery worker`, `celery
beat`, gunicorn) against a Redis and, where PostgreSQL itself is the fault, a
PostgreSQL that only this test uses, so killing them disturbs nobody else. Each of
those tests also gets a fresh database, so the beat's reconciler sees only its topics.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from shared.auth.service import create_api_key
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.migrate import upgrade
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from tests import services
from tests.faults.procs import PrivateRedis, Processes
from tests.llm_server import FakeOpenAI

# What each test measured, printed at the end of the run (the README quotes these lines).
COUNTS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults: kills and restarts real worker, web, Redis or PostgreSQL processes"
    )


def report(line: str) -> None:
    """Record one line of counts; printed now (with -s) and in the run's summary."""
    print(f"\n[faults] {line}")
    COUNTS.append(line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if COUNTS:
        terminalreporter.section("fault suite counts")
        for line in COUNTS:
            terminalreporter.write_line(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    outcome = yield
    if outcome.when == "call":
        item.stash[FAILED] = outcome.failed
    return outcome


FAILED = pytest.StashKey[bool]()


@pytest.fixture
def processes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Processes]:
    """Spawns children (logs in tmp_path); kills every process group left at teardown.

    When the test failed, the end of each child's log is printed to the failure report.
    """
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.close()
        if request.node.stash.get(FAILED, False):
            for child in procs.children:
                print(f"\n----- {child.name} (pid {child.pid}) {child.log} -----\n{child.tail(60)}")


@pytest.fixture
def private_redis(processes: Processes) -> PrivateRedis:
    return PrivateRedis(processes).start()


@pytest.fixture
def fresh_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated database of this test alone on the suite's PostgreSQL; dropped after."""
    test = re.sub(r"\W+", "_", request.node.name.removeprefix("test_"))[:24].lower()
    name = f"{services.TEST_DATABASE}_{test}"
    admin = services.admin_database_url()
    url = services.recreate_database(admin, name)
    upgrade(url)
    yield url
    services.drop_database(admin, name)


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    """An OpenAI-compatible server of this test alone (worker subprocesses call it)."""
    with FakeOpenAI() as server:
        yield server


def new_api_key(database_url: str) -> str:
    """A key of a new org, committed, for the HTTP clients of a test."""
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with UnitOfWork(make_session_factory(engine), RecordingQueue()) as uow:
            key = create_api_key(uow=uow, org_name=f"faults-{uuid.uuid4().hex[:12]}")
            uow.commit()
    finally:
        engine.dispose()
    return key
