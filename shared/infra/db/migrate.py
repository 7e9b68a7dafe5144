"""Alembic, driven from code so the CLI, the tests and `make lint` share one configuration.

Running the migrations needs no model. Comparing the models with them does, and the
models are the features': that comparison lives above them (shared/models.py), which
hands their metadata in (`alembic_config(..., metadata=...)`); the plumbing imports none.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import MetaData

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(
    database_url: str, *, metadata: MetaData | None = None, unmodelled: Collection[str] = ()
) -> Config:
    """`metadata`: the models, for a comparison; `unmodelled`: tables it leaves out."""
    config = Config()
    config.attributes["target_metadata"] = metadata
    config.attributes["unmodelled_tables"] = frozenset(unmodelled)
    config.set_main_option("script_location", str(MIGRATIONS))
    # Alembic's ini interpolation treats % specially; URLs may carry %-escapes.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)
