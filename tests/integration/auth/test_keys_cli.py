"""`driftless keys list` and `keys revoke`: keys are managed without SQL, never shown again.

The CLI commits, so these tests use the committed test database (as tests/integration/
test_cli.py does) and orgs of their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from flask.testing import FlaskClient
from freezegun import freeze_time
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import ApiKey, Org
from shared.auth.service import hash_key
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from worker.cli import main


@pytest.fixture
def cli_env(database_url: str, redis_url: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "REDIS_URL": redis_url}


@pytest.fixture
def org() -> str:
    return f"keys-{uuid.uuid4().hex[:12]}"


def _cli(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def _create(env: dict[str, str], org: str) -> str:
    result = _cli(env, "keys", "create", org)
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def _listed(env: dict[str, str], org: str) -> dict[str, list[str]]:
    """`keys list ORG` parsed: prefix → [created, revoked]."""
    result = _cli(env, "keys", "list", org)
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["PREFIX", "CREATED", "REVOKED"]
    return {prefix: rest for prefix, *rest in (row.split() for row in rows)}


def _prefix(key: str) -> str:
    return key[:10]


@pytest.fixture
def committed_client(settings: Any) -> Iterator[FlaskClient]:
    """The app on the committed database: it sees what the CLI committed."""
    from web.app import create_app

    app = create_app(settings, queue=RecordingQueue())
    yield app.test_client()
    app.extensions["driftless"].engine.dispose()


def _status(client: FlaskClient, key: str) -> int:
    response = client.post(
        "/agents-api/sessions",
        json={"agentId": "a", "userId": "u"},
        headers={"Authorization": f"Bearer {key}"},
    )
    return response.status_code


def test_keys_list_shows_each_prefix_and_never_the_key_or_its_hash(
    cli_env: dict[str, str], org: str
) -> None:
    keys = [_create(cli_env, org), _create(cli_env, org)]
    result = _cli(cli_env, "keys", "list", org)
    assert result.exit_code == 0, result.output
    for key in keys:
        assert key not in result.output
        assert hash_key(key) not in result.output
    listed = _listed(cli_env, org)
    assert sorted(listed) == sorted(_prefix(key) for key in keys)
    assert all(revoked == "-" for _created, revoked in listed.values())


def test_keys_list_of_an_unknown_org_fails_naming_it(cli_env: dict[str, str], org: str) -> None:
    result = _cli(cli_env, "keys", "list", org)
    assert result.exit_code != 0
    assert f"no org named {org!r}" in result.output


def test_a_revoked_key_is_401_once_the_auth_cache_forgets_it_while_the_orgs_other_key_works(
    cli_env: dict[str, str], org: str, committed_client: FlaskClient, settings: Any
) -> None:
    client = committed_client
    revoked, kept = _create(cli_env, org), _create(cli_env, org)
    with freeze_time("2026-12-03 12:00:00") as clock:
        assert _status(client, revoked) == 201  # the process now trusts it for auth_cache_s
        assert _status(client, kept) == 201

        result = _cli(cli_env, "keys", "revoke", _prefix(revoked))
        assert result.exit_code == 0, result.output
        assert revoked not in result.output

        # shared/auth/cache.py: a process trusts a key it looked up for at most
        # DRIFTLESS_AUTH_CACHE_S, so revocation reaches it within that bound.
        clock.tick(settings.auth_cache_s + 0.1)
        response = client.get("/agents-api/scopes", headers={"Authorization": f"Bearer {revoked}"})
        assert response.status_code == 401
        assert response.json["error"]["code"] == "unauthorized"  # type: ignore[index]
        assert _status(client, kept) == 201
    listed = _listed(cli_env, org)
    assert listed[_prefix(revoked)][1] != "-"
    assert listed[_prefix(kept)][1] == "-"


def test_a_revoked_key_is_401_on_the_very_next_request_when_the_auth_cache_is_off(
    cli_env: dict[str, str], org: str, settings: Any
) -> None:
    from web.app import create_app

    app = create_app(settings.model_copy(update={"auth_cache_s": 0}), queue=RecordingQueue())
    client = app.test_client()
    try:
        revoked = _create(cli_env, org)
        assert _status(client, revoked) == 201
        assert _cli(cli_env, "keys", "revoke", _prefix(revoked)).exit_code == 0
        assert _status(client, revoked) == 401
    finally:
        app.extensions["driftless"].engine.dispose()


def test_revoking_a_key_twice_succeeds_and_keeps_the_first_revocation_time(
    cli_env: dict[str, str], org: str
) -> None:
    prefix = _prefix(_create(cli_env, org))
    first = _cli(cli_env, "keys", "revoke", prefix)
    assert first.exit_code == 0, first.output
    revoked_at = _listed(cli_env, org)[prefix][1]
    second = _cli(cli_env, "keys", "revoke", prefix)
    assert second.exit_code == 0, second.output
    assert _listed(cli_env, org)[prefix][1] == revoked_at != "-"


def test_revoking_an_unknown_prefix_fails_and_revokes_nothing(
    cli_env: dict[str, str], org: str
) -> None:
    prefix = _prefix(_create(cli_env, org))
    unknown = "dl_" + uuid.uuid4().hex[:7]
    result = _cli(cli_env, "keys", "revoke", unknown)
    assert result.exit_code != 0
    assert f"no API key has the prefix {unknown!r}" in result.output
    assert _listed(cli_env, org)[prefix][1] == "-"


def test_an_ambiguous_prefix_is_refused_naming_how_many_keys_match(
    cli_env: dict[str, str], org: str, committed_factory: sessionmaker[Session]
) -> None:
    # Two keys whose stored prefixes share their first nine characters.
    stem = "dl_" + uuid.uuid4().hex[:6]
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        owner = Org(name=org)
        uow.session.add(owner)
        uow.session.flush()
        org_id = owner.id
        for last in "ab":
            uow.session.add(
                ApiKey(org_id=org_id, key_hash=hash_key(uuid.uuid4().hex), prefix=stem + last)
            )
        uow.commit()

    result = _cli(cli_env, "keys", "revoke", stem)
    assert result.exit_code != 0
    assert "matches 2 keys" in result.output
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        revoked = uow.session.scalars(select(ApiKey.revoked_at).where(ApiKey.org_id == org_id))
        assert list(revoked) == [None, None]
    # The whole prefix picks one.
    assert _cli(cli_env, "keys", "revoke", stem + "a").exit_code == 0
    assert [row[1] == "-" for _, row in sorted(_listed(cli_env, org).items())] == [False, True]


def test_a_prefix_with_like_wildcards_matches_only_literally(
    cli_env: dict[str, str], org: str
) -> None:
    # "_" and "%" are LIKE wildcards: unescaped, "dl%" would match every key there is.
    _create(cli_env, org)
    result = _cli(cli_env, "keys", "revoke", "dl%")
    assert result.exit_code != 0
    assert "no API key has the prefix 'dl%'" in result.output
