"""Alembic environment: the URL comes from the caller (shared.infra.db.migrate), not a file."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from shared.infra.db.engine import sqlalchemy_url

config = context.config
# The models, when the caller compares them with the migrations (shared/models.py);
# none to run the migrations.
target_metadata = config.attributes.get("target_metadata")
unmodelled = config.attributes.get("unmodelled_tables", frozenset())


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Tables no model declares (the vector tables, which exist only with pgvector:
    shared/embeddings/schema.py) are left out of the comparison."""
    return not (type_ == "table" and name in unmodelled)


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
