"""`driftless orgs set`: an operator gives one org its own request rate limit, without SQL.

The CLI commits, so these tests use the committed test database (as test_keys_cli.py
does) and orgs of their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from flask.testing import FlaskClient

from shared.infra.queue import RecordingQueue
from worker.cli import main


@pytest.fixture
def cli_env(database_url: str, redis_url: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "REDIS_URL": redis_url}


def _cli(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


@pytest.fixture
def org_key(cli_env: dict[str, str]) -> tuple[str, str]:
    org = f"orgs-{uuid.uuid4().hex[:12]}"
    created = _cli(cli_env, "keys", "create", org)
    assert created.exit_code == 0, created.output
    return org, created.stdout.strip().splitlines()[-1]


@pytest.fixture
def committed_client(settings: Any) -> Iterator[FlaskClient]:
    """The app on the committed database, with no key cache: it sees each change at once."""
    from web.app import create_app

    app = create_app(settings.model_copy(update={"auth_cache_s": 0}), queue=RecordingQueue())
    yield app.test_client()
    app.extensions["driftless"].engine.dispose()


def _statuses(client: FlaskClient, key: str, n: int) -> list[int]:
    return [
        client.get("/agents-api/scopes", headers={"Authorization": f"Bearer {key}"}).status_code
        for _ in range(n)
    ]


def test_orgs_set_lowers_an_orgs_request_limit_and_default_restores_the_fleets(
    cli_env: dict[str, str], org_key: tuple[str, str], committed_client: FlaskClient
) -> None:
    org, key = org_key
    lowered = _cli(cli_env, "orgs", "set", org, "--requests-per-s", "0.001", "--request-burst", "2")
    assert lowered.exit_code == 0, lowered.output
    assert "requests a second 0.001, request burst 2" in lowered.stdout
    assert _statuses(committed_client, key, 3) == [200, 200, 429]

    restored = _cli(cli_env, "orgs", "set", org, "--requests-per-s", "default")
    assert restored.exit_code == 0, restored.output
    assert "requests a second the default (DRIFTLESS_ORG_REQUESTS_PER_S)" in restored.stdout
    assert "request burst 2" in restored.stdout  # what was not named stays
    # At the default rate (1000/s) the bucket refills within a few requests' time.
    assert 200 in _statuses(committed_client, key, 3)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--request-burst", "0"], "request burst"),
        (["--request-burst", "1.5"], "is not a whole number"),
        (["--requests-per-s", "-1"], "requests a second"),
        (["--requests-per-s", "fast"], "is not a number"),
        # [4.1]: so slow a rate overflowed the bucket's expiry, and the limiter let all by.
        (["--requests-per-s", "1e-20"], "--requests-per-s: requests a second must be a number"),
        (["--requests-per-s", "nan"], "--requests-per-s"),
        (["--requests-per-s", "1e9"], "--requests-per-s"),
        (["--request-burst", "10000000"], "--request-burst: the request burst must be"),
    ],
)
def test_orgs_set_refuses_a_limit_that_is_no_limit(
    cli_env: dict[str, str], org_key: tuple[str, str], args: list[str], error: str
) -> None:
    result = _cli(cli_env, "orgs", "set", org_key[0], *args)
    assert result.exit_code != 0
    assert error in result.output


def test_orgs_set_writes_nothing_when_one_of_its_limits_is_refused_41(
    cli_env: dict[str, str], org_key: tuple[str, str], committed_client: FlaskClient
) -> None:
    org, key = org_key
    before = _limits(committed_client, key)
    refused = _cli(cli_env, "orgs", "set", org, "--llm-rpm", "30", "--requests-per-s", "1e-20")
    assert refused.exit_code == 1
    assert "--requests-per-s" in refused.output
    assert _limits(committed_client, key) == before
    # The bounds themselves are accepted.
    ok = _cli(cli_env, "orgs", "set", org, "--requests-per-s", "1000000", "--llm-rpm", "1000000")
    assert ok.exit_code == 0, ok.output


def test_orgs_set_names_an_unknown_org(cli_env: dict[str, str]) -> None:
    result = _cli(cli_env, "orgs", "set", "no-such-org-anywhere", "--request-burst", "5")
    assert result.exit_code == 1
    assert "no org named 'no-such-org-anywhere'" in result.output


def _limits(client: FlaskClient, key: str) -> Any:
    answer = client.get("/agents-api/limits", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.json
    return answer.json


def test_orgs_set_gives_an_org_an_llm_budget_that_it_reads_and_default_gives_it_back(
    cli_env: dict[str, str], org_key: tuple[str, str], committed_client: FlaskClient
) -> None:
    org, key = org_key
    fleet = _limits(committed_client, key)
    assert (fleet["llmRpm"], fleet["monthlyTokens"], fleet["budgetExhausted"]) == (0, 0, False)

    budgeted = _cli(cli_env, "orgs", "set", org, "--llm-rpm", "30", "--monthly-tokens", "5000000")
    assert budgeted.exit_code == 0, budgeted.output
    assert "LLM calls a minute 30, monthly tokens 5000000" in budgeted.stdout
    own = _limits(committed_client, key)
    assert (own["llmRpm"], own["monthlyTokens"], own["tokensUsed"]) == (30, 5_000_000, 0)
    assert own["requestsPerS"] == fleet["requestsPerS"]  # what was not named stays

    restored = _cli(cli_env, "orgs", "set", org, "--llm-rpm", "default")
    assert restored.exit_code == 0, restored.output
    assert "LLM calls a minute the default (DRIFTLESS_ORG_LLM_RPM)" in restored.stdout
    assert (
        _limits(committed_client, key)["llmRpm"],
        _limits(committed_client, key)["monthlyTokens"],
    ) == (0, 5_000_000)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--llm-rpm", "-1"], "LLM calls a minute"),
        (["--llm-rpm", "1.5"], "is not a whole number"),
        (["--monthly-tokens", "-5"], "monthly tokens"),
        (["--monthly-tokens", "lots"], "is not a whole number"),
        (["--llm-rpm", "2000000"], "--llm-rpm: LLM calls a minute must be a whole number"),
        (["--monthly-tokens", "10000000000000000"], "--monthly-tokens: monthly tokens must be"),
    ],
)
def test_orgs_set_refuses_a_budget_that_is_no_budget(
    cli_env: dict[str, str], org_key: tuple[str, str], args: list[str], error: str
) -> None:
    result = _cli(cli_env, "orgs", "set", org_key[0], *args)
    assert result.exit_code != 0
    assert error in result.output
