"""`driftless import` moves an org to a deployment where it does not exist yet, as
docs/operations.md tells an operator: export on the old one, import with --create-org."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from tests.conftest import new_key
from tests.helpers import new_session, post_message
from worker.cli import main


def _exported_org(settings: Settings, factory: sessionmaker[Session], path: Path) -> Path:
    """An org with one session of two messages, exported to `path`."""
    from web.app import create_app

    auth = {"Authorization": f"Bearer {new_key(factory)}"}
    client = create_app(settings, queue=RecordingQueue(), session_factory=factory).test_client()
    session = new_session(client, auth, agent="planner", user="ada")
    post_message(client, auth, session["id"], "We chose PostgreSQL.")
    post_message(client, auth, session["id"], "Noted.", role="assistant")
    response = client.get("/agents-api/export", headers=auth)
    assert response.status_code == 200
    path.write_bytes(response.get_data())
    return path


def _org_named(factory: sessionmaker[Session], name: str) -> Org | None:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        return uow.session.scalar(select(Org).where(Org.name == name))


@pytest.fixture
def cli_env(database_url: str, redis_url: str) -> dict[str, str]:
    """A `driftless` command's servers: the tests'. The broker is the data Redis: the org
    exported here has no promoted topic, so its import sends no job."""
    return {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "CELERY_BROKER_URL": redis_url}


def test_import_into_a_new_org_needs_create_org_and_says_so_43(
    settings: Settings, committed_factory: sessionmaker[Session], cli_env: dict[str, str],
    tmp_path: Path,
) -> None:  # fmt: skip
    export = _exported_org(settings, committed_factory, tmp_path / "org.ndjson")
    new = f"moved-{uuid.uuid4().hex[:8]}"

    def run(*flags: str) -> tuple[int, str]:
        result = CliRunner().invoke(
            main, ["import", str(export), "--org", new, *flags], env=cli_env
        )
        return result.exit_code, result.output

    code, output = run()
    assert code != 0 and f"no org named {new!r}" in output and "--create-org" in output
    assert _org_named(committed_factory, new) is None  # refused: nothing written

    code, output = run("--create-org")
    assert code == 0, output
    imported = json.loads(output.splitlines()[-1])
    assert imported["sessions"] == 1 and imported["messages"] == 2
    assert _org_named(committed_factory, new) is not None

    code, output = run("--create-org")  # again: the org is there, the session skipped
    assert code == 0, output
    assert json.loads(output.splitlines()[-1])["skippedSessions"] == 1
