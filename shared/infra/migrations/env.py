"""Alembic environment: the URL comes from the caller (shared.infra.db.migrate), not a file."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from shared.infra.db.engine import sqlalchemy_url
from shared.models import VECTOR_TABLES, Base

config = context.config
target_metadata = Base.metadata


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """The vector tables exist only with pgvector and no model declares them
    (shared/embeddings/schema.py): the check leaves them out."""
    return not (type_ == "table" and name in VECTOR_TABLES)


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: run migrations through `driftless db upgrade`")
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            compare_type=True,
            include_name=include_name,
        )
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
