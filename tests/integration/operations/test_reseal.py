"""`driftless secrets reseal` ([4.1]): every stored secret under the newest key, in
batches each committed, safe to interrupt and to run twice."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from cryptography.fernet import Fernet
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.domain.errors import SealingKeyMissing
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.infra.sealing import SecretBox, SecretUnavailable
from shared.providers.models import OrgProvider
from shared.reseal import Resealed, reseal, sealed_columns
from shared.webhooks.models import Webhook
from tests.services import SEALING_KEY
from worker.cli import main

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()
ROTATED = SecretBox(f"{NEW},{OLD}")  # a new key put first, the old one still listed


def _uow(factory: sessionmaker[Session]) -> Callable[[], UnitOfWork]:
    return lambda: UnitOfWork(factory, RecordingQueue())


def _seed(factory: sessionmaker[Session], secrets: dict[str, str]) -> uuid.UUID:
    """An org with a webhook per sealed value of `secrets` and a provider sealed under OLD;
    the tables hold nothing else (inside the test's transaction)."""
    with _uow(factory)() as uow:
        uow.session.execute(delete(Webhook))
        uow.session.execute(delete(OrgProvider))
        org = Org(name=f"org-{uuid.uuid4().hex[:8]}")
        uow.session.add(org)
        uow.session.flush()
        for sealed in secrets.values():
            uow.session.add(
                Webhook(org_id=org.id, url="https://x.example/", events=[], sealed_secret=sealed)
            )
        uow.session.add(
            OrgProvider(org_id=org.id, model="m", sealed_api_key=SecretBox(OLD).seal("sk-org-key"))
        )
        uow.commit()
        return org.id


def _stored(factory: sessionmaker[Session]) -> list[str]:
    with factory() as session:
        webhooks = session.scalars(select(Webhook.sealed_secret)).all()
        return [*webhooks, *session.scalars(select(OrgProvider.sealed_api_key))]


def _by_column(done: list[Resealed]) -> dict[str, tuple[int, int, int, int]]:
    return {c.column: (c.rows, c.resealed, c.plain, c.current) for c in done}


def test_every_sealed_column_is_found_41() -> None:
    from shared.models import Base

    names = {f"{column.table.name}.{column.name}" for column in sealed_columns()}
    assert names == {"webhooks.sealed_secret", "org_providers.sealed_api_key"}
    # A new column named for what it holds, but not marked, would be left out of reseal.
    named = {
        f"{table.name}.{column.name}"
        for table in Base.metadata.sorted_tables
        for column in table.columns
        if column.name.startswith("sealed_")
    }
    assert named <= names


def test_old_key_rows_open_with_the_new_key_only_after_reseal_and_plain_rows_get_sealed_41(
    session_factory: sessionmaker[Session],
) -> None:
    _seed(session_factory, {"old": SecretBox(OLD).seal("whsec_old"), "plain": "plain:whsec_p"})
    newest_only = SecretBox(NEW)
    with pytest.raises(SecretUnavailable):
        newest_only.open(_stored(session_factory)[0])

    done = reseal(new_uow=_uow(session_factory), box=ROTATED, batch=1)

    assert _by_column(done) == {
        "webhooks.sealed_secret": (2, 2, 1, 0),
        "org_providers.sealed_api_key": (1, 1, 0, 0),
    }
    stored = _stored(session_factory)
    assert not any(value.startswith("plain:") for value in stored)
    assert sorted(newest_only.open(value) for value in stored) == [
        "sk-org-key", "whsec_old", "whsec_p"
    ]  # fmt: skip

    again = reseal(new_uow=_uow(session_factory), box=ROTATED)

    assert _by_column(again) == {
        "webhooks.sealed_secret": (2, 0, 0, 2),
        "org_providers.sealed_api_key": (1, 0, 0, 1),
    }
    assert _stored(session_factory) == stored  # a second run changes nothing


def test_an_interrupted_reseal_keeps_its_committed_batches_and_a_rerun_finishes_41(
    session_factory: sessionmaker[Session],
) -> None:
    _seed(session_factory, {n: SecretBox(OLD).seal(f"whsec_{n}") for n in ("a", "b", "c")})
    transactions = 0

    def failing_after_four() -> UnitOfWork:
        nonlocal transactions
        transactions += 1
        if transactions > 4:
            raise ConnectionError("the database went away")
        return UnitOfWork(session_factory, RecordingQueue())

    with pytest.raises(ConnectionError):
        reseal(new_uow=failing_after_four, box=ROTATED, batch=1)
    # org_providers' row and its empty last batch, then two of the webhooks, committed.
    assert [_opens(NEW, value) for value in _stored(session_factory)].count(True) == 3

    done = reseal(new_uow=_uow(session_factory), box=ROTATED, batch=1)

    assert _by_column(done)["webhooks.sealed_secret"] == (3, 1, 0, 2)
    assert all(_opens(NEW, value) for value in _stored(session_factory))


def _opens(keys: str, sealed: str) -> bool:
    try:
        SecretBox(keys).open(sealed)
    except SecretUnavailable:
        return False
    return True


def test_reseal_without_a_key_is_refused_and_writes_nothing_41(
    session_factory: sessionmaker[Session],
) -> None:
    _seed(session_factory, {"plain": "plain:whsec_p"})

    with pytest.raises(SealingKeyMissing, match="DRIFTLESS_SECRET_KEYS"):
        reseal(new_uow=_uow(session_factory), box=SecretBox(None))
    assert "plain:whsec_p" in _stored(session_factory)


def test_the_command_reseals_and_says_what_it_did_41(
    database_url: str, redis_url: str, committed_factory: sessionmaker[Session]
) -> None:
    # Blank is unset (whatever the shell running the tests holds).
    env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "DRIFTLESS_WEBHOOK_KEYS": ""}
    with _uow(committed_factory)() as uow:
        org = Org(name=f"org-{uuid.uuid4().hex[:8]}")
        uow.session.add(org)
        uow.session.flush()
        webhook = Webhook(
            org_id=org.id, url="https://x.example/", events=[],
            sealed_secret=SecretBox(OLD).seal("whsec_cli"),
        )  # fmt: skip
        uow.session.add(webhook)
        uow.commit()

    refused = CliRunner().invoke(
        main, ["secrets", "reseal"], env={**env, "DRIFTLESS_SECRET_KEYS": ""}
    )
    assert refused.exit_code == 1
    assert "DRIFTLESS_SECRET_KEYS is unset" in refused.output

    # The run's key first: other tests' rows are already under it and stay as they are.
    keys = f"{SEALING_KEY},{OLD}"
    result = CliRunner().invoke(
        main, ["secrets", "reseal"], env={**env, "DRIFTLESS_SECRET_KEYS": keys}
    )

    assert "webhooks.sealed_secret: " in result.output and " resealed" in result.output
    with committed_factory() as session:
        sealed = session.scalar(select(Webhook.sealed_secret).where(Webhook.id == webhook.id))
        session.execute(delete(Org).where(Org.id == org.id))
        session.commit()
    assert sealed is not None and SecretBox(SEALING_KEY).open(sealed) == "whsec_cli"
