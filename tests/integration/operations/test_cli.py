"""The `driftless` command line against the test database."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from flask.testing import FlaskClient

from worker.cli import main


@pytest.fixture
def cli_env(database_url: str, redis_url: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "REDIS_URL": redis_url}


def test_db_upgrade_is_idempotent(cli_env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["db", "upgrade"], env=cli_env)
    assert result.exit_code == 0, result.output
    assert "head" in result.output


def test_db_check_passes_on_a_migrated_database(cli_env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["db", "check"], env=cli_env)
    assert result.exit_code == 0, result.output


def test_keys_create_prints_a_working_key_on_the_last_line(
    cli_env: dict[str, str], settings: Any
) -> None:
    result = CliRunner().invoke(main, ["keys", "create", "cli-org"], env=cli_env)
    assert result.exit_code == 0, result.output
    key = result.stdout.strip().splitlines()[-1]
    assert key.startswith("dl_")

    from shared.infra.queue import RecordingQueue
    from web.app import create_app

    client: FlaskClient = create_app(settings, queue=RecordingQueue()).test_client()
    response = client.post(
        "/agents-api/sessions",
        json={"agentId": "a", "userId": "u"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 201


def test_a_bad_environment_value_stops_the_command_naming_it(cli_env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["db", "upgrade"], env={**cli_env, "PORT": "http"})
    assert result.exit_code != 0
    assert "PORT" in result.output
