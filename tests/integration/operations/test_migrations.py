"""The schema comes from Alembic alone, and the models agree with it."""

from __future__ import annotations

import psycopg2
from sqlalchemy import create_engine, inspect

from shared.infra.db.engine import sqlalchemy_url
from shared.infra.db.migrate import upgrade
from shared.models import check
from tests import services


def test_models_and_migrations_agree(database_url: str) -> None:
    check(database_url)  # raises when a model changed without a migration


def test_migrations_run_from_empty_and_downgrade_cleanly() -> None:
    url = services.recreate_database(
        services.admin_database_url(), f"{services.TEST_DATABASE}_migrations"
    )
    from alembic import command

    from shared.infra.db.migrate import alembic_config

    upgrade(url)
    upgrade(url)  # a second `db upgrade` is a no-op
    engine = create_engine(sqlalchemy_url(url))
    try:
        tables = set(inspect(engine).get_table_names())
        assert {"sessions", "topics", "messages", "notes", "facts", "evaluations"} <= tables
        command.downgrade(alembic_config(url), "base")
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    finally:
        engine.dispose()
    connection = psycopg2.connect(services.admin_database_url())
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE {services.TEST_DATABASE}_migrations WITH (FORCE)")
    connection.close()
