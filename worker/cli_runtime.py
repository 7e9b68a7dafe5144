"""What every `driftless` command stands on: its runtime, and the database it talks to."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from shared.bootstrap import Runtime
from shared.domain.errors import DomainError
from shared.infra.config import load_settings_or_exit
from shared.infra.runtime import database_url_of


@contextmanager
def command_runtime(**overrides: Any) -> Iterator[Runtime]:
    """A command's runtime (shared/bootstrap.py): one connection, given back at the end.
    A domain error (no such org, an ambiguous prefix) ends the command with its message."""
    runtime = Runtime(load_settings_or_exit(), pool_size=1, max_overflow=0, **overrides)
    try:
        yield runtime
    except DomainError as error:
        raise click.ClickException(error.message) from None
    finally:
        runtime.close()


def database_url() -> str:
    """The configured database, or the embedded one (started if need be)."""
    return database_url_of(load_settings_or_exit())
