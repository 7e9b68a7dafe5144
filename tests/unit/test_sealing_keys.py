"""Which keys seal stored secrets ([4.1]): DRIFTLESS_SECRET_KEYS, the deprecated
DRIFTLESS_WEBHOOK_KEYS, or the dev key `make run` keeps under `.driftless/`."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from shared.infra.config import load_settings
from shared.infra.runtime import sealing_keys_of
from shared.infra.sealing import SecretBox
from worker.supervisor import sealing_env

NEW, OLD = Fernet.generate_key().decode(), Fernet.generate_key().decode()
SERVER = {"DATABASE_URL": "postgresql://db.internal/driftless"}


def test_the_new_name_seals_and_the_old_one_is_read_with_one_deprecation_line_41(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert sealing_keys_of(load_settings({**SERVER, "DRIFTLESS_SECRET_KEYS": NEW})) == NEW
    assert caplog.records == []

    with caplog.at_level(logging.WARNING):
        assert sealing_keys_of(load_settings({**SERVER, "DRIFTLESS_WEBHOOK_KEYS": OLD})) == OLD
    (line,) = caplog.records
    assert "DRIFTLESS_WEBHOOK_KEYS is deprecated" in line.getMessage()
    assert "DRIFTLESS_SECRET_KEYS" in line.getMessage()


def test_when_both_names_are_set_the_new_one_wins_and_the_log_says_so_41(
    caplog: pytest.LogCaptureFixture,
) -> None:
    both = {**SERVER, "DRIFTLESS_SECRET_KEYS": NEW, "DRIFTLESS_WEBHOOK_KEYS": OLD}
    with caplog.at_level(logging.WARNING):
        assert sealing_keys_of(load_settings(both)) == NEW
    (line,) = caplog.records
    assert "DRIFTLESS_SECRET_KEYS seals and opens" in line.getMessage()
    assert "DRIFTLESS_WEBHOOK_KEYS is ignored" in line.getMessage()


def test_a_server_without_keys_seals_nothing_41(tmp_path: Path) -> None:
    settings = load_settings({**SERVER, "DRIFTLESS_HOME": str(tmp_path)})
    assert sealing_keys_of(settings) is None
    assert not (tmp_path / "secret-key").exists()  # no dev key beside a real database


def test_make_run_keeps_one_dev_key_private_and_reuses_it_41(tmp_path: Path) -> None:
    home = tmp_path / ".driftless"
    settings = load_settings({"DRIFTLESS_HOME": str(home)})

    first = sealing_env(settings)
    sealed = SecretBox(first["DRIFTLESS_SECRET_KEYS"]).seal("whsec_yesterday")

    key_file = home / "secret-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert sealing_env(settings) == first  # the next `make run`
    # A process on the embedded database (the CLI, `flask run`) opens it with the same key.
    assert SecretBox(sealing_keys_of(settings)).open(sealed) == "whsec_yesterday"
    assert [path.name for path in home.iterdir()] == ["secret-key"]


def test_make_run_passes_the_operators_keys_on_and_makes_none_41(tmp_path: Path) -> None:
    for variable in ("DRIFTLESS_SECRET_KEYS", "DRIFTLESS_WEBHOOK_KEYS"):
        settings = load_settings({variable: NEW, "DRIFTLESS_HOME": str(tmp_path)})
        assert sealing_env(settings) == {}
    assert not (tmp_path / "secret-key").exists()
