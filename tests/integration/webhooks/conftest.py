"""The app of the webhook tests: private targets allowed (their receivers, and the URLs
they subscribe, are on 127.0.0.1); secrets are sealed under the run's key (tests/conftest.py)."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import RecordingQueue


@pytest.fixture
def client(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue
) -> FlaskClient:
    from web.app import create_app

    local = settings.model_copy(update={"webhook_allow_private": True})
    return create_app(local, queue=queue, session_factory=session_factory).test_client()
