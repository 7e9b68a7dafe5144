"""A real Celery worker thread consuming the real Redis broker (never eager mode)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from sqlalchemy.orm import Session, sessionmaker

from shared.config import Settings
from tests.conftest import new_key
from worker.app import make_celery


@pytest.fixture(scope="session")
def celery_app(settings: Settings) -> Celery:
    import worker.tasks  # noqa: F401  (registers the shared tasks before the app finalizes)

    return make_celery(settings)


@pytest.fixture(scope="session")
def celery_worker(celery_app: Celery) -> Iterator[Any]:
    # threads: several jobs at once, as production runs them; no ping task (no result backend).
    with start_worker(
        celery_app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30
    ) as worker:
        yield worker


@pytest.fixture
def live_app(settings: Settings, celery_worker: Any) -> Any:
    """The real app: real commits, jobs sent to the real broker."""
    from web.app import create_app

    return create_app(settings)


@pytest.fixture
def live_auth(committed_factory: sessionmaker[Session]) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_key(committed_factory)}"}
