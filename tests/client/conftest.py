"""The real system for the client's tests: gunicorn's web and a Celery worker, as the
Procfile runs them, on a migrated database and a Redis of this run alone.

Started once for the whole run (each start spends seconds importing), with the fault
suite's helpers (tests/faults/procs.py); the local LLM stands in for OpenAI.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from shared.infra.db.migrate import upgrade
from tests import services
from tests.faults.conftest import new_api_key
from tests.faults.procs import PrivateRedis, Processes, driftless_env, free_port

DATABASE = f"{services.TEST_DATABASE}_client"


@dataclass(frozen=True)
class System:
    base_url: str
    database_url: str
    processes: Processes

    def logs(self) -> str:
        """The end of each child's log, for a failure message."""
        return "\n".join(
            f"----- {c.name} (pid {c.pid}) -----\n{c.tail(40)}" for c in self.processes.children
        )


@pytest.fixture(scope="session")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    processes = Processes(tmp_path_factory.mktemp("client-system"))
    admin = services.admin_database_url()
    try:
        redis = PrivateRedis(processes).start()
        database_url = services.recreate_database(admin, DATABASE)
        upgrade(database_url)
        env = driftless_env(
            DATABASE_URL=database_url,
            REDIS_URL=redis.url,
            CELERY_BROKER_URL=redis.url,
            DRIFTLESS_LLM="local",
            DRIFTLESS_DEBOUNCE_MS="0",  # an exit trigger fires at once
            DRIFTLESS_WEBHOOK_ALLOW_PRIVATE="true",  # the tests' receiver is on 127.0.0.1
        )
        port = free_port()
        children = (
            processes.web(env, port, workers=1, wait=False),
            processes.worker(env, concurrency=2, wait=False),
        )
        for child in children:
            child.wait_ready()
        yield System(f"http://127.0.0.1:{port}", database_url, processes)
    finally:
        processes.close()
        services.drop_database(admin, DATABASE)


@pytest.fixture
def org_key(system: System) -> str:
    """A key of a new org: each test sees only its own sessions and scopes."""
    return new_api_key(system.database_url)
