"""`driftless reevaluate`: the matching topics, one job each, on the right queue."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import create_api_key
from shared.db.uow import UnitOfWork
from shared.queue import RecordingQueue
from tests import services
from tests.helpers import new_session, post_message
from worker.cli import main

CLI_BROKER_DB = 10


@pytest.fixture
def org(committed_factory: sessionmaker[Session]) -> tuple[str, dict[str, str]]:
    name = f"reeval-{uuid.uuid4().hex[:8]}"
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        key = create_api_key(uow=uow, org_name=name)
        uow.commit()
    return name, {"Authorization": f"Bearer {key}"}


def test_reevaluate_enqueues_one_job_per_matching_topic(
    settings: Any, committed_factory: sessionmaker[Session], org: tuple[str, dict[str, str]],
    database_url: str, redis_url: str,
) -> None:  # fmt: skip
    from web.app import create_app

    name, auth = org
    client = create_app(
        settings, queue=RecordingQueue(), session_factory=committed_factory
    ).test_client()
    ada = new_session(client, auth, agent="planner", user="ada")
    post_message(client, auth, ada["id"], "first topic")
    client.post(f"/agents-api/sessions/{ada['id']}/topics", json={}, headers=auth)
    post_message(client, auth, ada["id"], "second topic")
    bob = new_session(client, auth, agent="planner", user="bob")
    post_message(client, auth, bob["id"], "bob's topic")

    broker = f"{services.redis_base_url()}/{CLI_BROKER_DB}"
    broker_client = redis.Redis.from_url(broker)
    broker_client.flushdb()
    env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "CELERY_BROKER_URL": broker}
    result = CliRunner().invoke(
        main, ["reevaluate", "--org", name, "--user", "ada", "--rate", "1000"], env=env
    )
    assert result.exit_code == 0, result.output
    assert "enqueued 2 re-evaluations" in result.output
    assert broker_client.llen("llm") == 2  # one summary (closed), one evaluation (active)
    assert broker_client.llen("fast") == 0
    broker_client.flushdb()
