"""A real Celery worker thread consuming the real Redis broker (never eager mode)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from tests.conftest import new_key
from tests.worker_thread import worker_thread
from worker.app import make_celery


@pytest.fixture(scope="session")
def celery_app(settings: Settings) -> Celery:
    import worker.tasks  # noqa: F401  (registers the shared tasks before the app finalizes)

    return make_celery(settings)


@pytest.fixture(scope="package")
def celery_worker(celery_app: Celery) -> Iterator[Any]:
    """The real worker thread, shared by tests/e2e and stopped when that package ends.

    Not session-wide: tests/integration/operations/test_pgbouncer.py starts a worker thread of its
    own, and two alive at once in one process break each other (see worker_thread).
    """
    with worker_thread(celery_app) as worker:
        yield worker


@pytest.fixture
def live_app(settings: Settings, celery_worker: Any) -> Any:
    """The real app: real commits, jobs sent to the real broker."""
    from web.app import create_app

    return create_app(settings)


@pytest.fixture
def live_auth(committed_factory: sessionmaker[Session]) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_key(committed_factory)}"}
