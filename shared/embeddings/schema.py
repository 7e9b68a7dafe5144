"""The vector tables: created only on a server that has pgvector, by an idempotent step.

Migration 0018 runs these statements as they were then; `driftless db upgrade` (after the
migrations) and `driftless embeddings backfill` call `ensure_vector_schema`, so a server
that gains the extension later gets the tables without a new migration. A server without
it passes every migration and simply has none of these tables: the feature reports itself
off (`shared/embeddings/store.py: vectors_available`).

The `embedding` column has no fixed dimension, so a model of any size fits and a model
change needs no DDL. An HNSW index needs one, so each (table, model, dimension) gets its
own partial expression index, `(embedding::halfvec(N)) halfvec_cosine_ops WHERE model = M`,
made by `ensure_hnsw_index` once the first batch of that model is stored (the size is
known then). A query uses it by ordering by `indexed_distance(N, …)` under `model = M`
(shared/search/meaning.py, `store.nearest_messages`).

The index holds half-precision copies: half the pages of a `vector` index (384
dimensions, 322,000 vectors: 357 MB against 624 MB), so a walk reads half as much (a
filtered walk at a 100,000-message scope: p50 37 ms against 48, the same neighbours but
for 8 %, which an approximate walk misses anyway), and models of up to 4,000 dimensions
are indexed (a `vector` index stops at 2,000). The stored vectors, and every cosine a
search scores by, stay single-precision.
"""

from __future__ import annotations

import hashlib
import logging

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.pool import NullPool

from shared.infra.db.engine import sqlalchemy_url

log = logging.getLogger(__name__)

EXTENSION = "vector"
MESSAGE_VECTORS = "message_vectors"
TOPIC_VECTORS = "topic_vectors"
# Tables no model declares (they exist only with pgvector): Alembic's check skips them.
VECTOR_TABLES = frozenset({MESSAGE_VECTORS, TOPIC_VECTORS})
# pgvector's HNSW indexes `halfvec` of at most 4,000 dimensions; a larger model's
# vectors are searched exactly (a scope's sessions are few).
HNSW_MAX_DIMENSIONS = 4000
# pgvector's `vector` holds at most 16,000 numbers: a longer one fails its statement.
VECTOR_MAX_DIMENSIONS = 16000

# Every statement is idempotent. session_id is on both tables so that a scope's search
# filters by its sessions without a join, and so that they go with their session.
_DDL = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    """CREATE TABLE IF NOT EXISTS message_vectors (
        message_id bigint PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
        session_id uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        model text NOT NULL,
        embedding vector NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX IF NOT EXISTS ix_message_vectors_session_id ON message_vectors (session_id)",
    """CREATE TABLE IF NOT EXISTS topic_vectors (
        topic_id uuid PRIMARY KEY REFERENCES topics (id) ON DELETE CASCADE,
        session_id uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        model text NOT NULL,
        source_hash text NOT NULL,
        embedding vector NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX IF NOT EXISTS ix_topic_vectors_session_id ON topic_vectors (session_id)",
)
# One schema change at a time across processes (a migration, a worker, the CLI).
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('driftless:vector-schema'))"


def extension_available(connection: Connection) -> bool:
    """The server can install pgvector (whether or not it is installed yet)."""
    found = connection.execute(
        text("SELECT 1 FROM pg_available_extensions WHERE name = :name"), {"name": EXTENSION}
    ).first()
    return found is not None


def vector_tables_exist(connection: Connection) -> bool:
    """Both vector tables are there (the extension was available at some upgrade)."""
    found = connection.execute(
        text("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
             " AND tablename = ANY(:names)"),
        {"names": sorted(VECTOR_TABLES)},
    ).scalar()  # fmt: skip
    return found == len(VECTOR_TABLES)


def ensure_vector_schema(connection: Connection) -> bool:
    """Create the extension and the vector tables if the server has pgvector; True if
    they exist afterwards. Runs in the caller's transaction."""
    if not extension_available(connection):
        log.warning(
            "embeddings off: the PostgreSQL server has no %r extension (pgvector);"
            " install it and run `driftless db upgrade`", EXTENSION,
        )  # fmt: skip
        return False
    connection.execute(text(_LOCK))
    for statement in _DDL:
        connection.execute(text(statement))
    return True


def hnsw_index_name(table: str, model: str, dimensions: int) -> str:
    """A name within PostgreSQL's 63 bytes, whatever the model's name."""
    digest = hashlib.sha256(model.encode()).hexdigest()[:10]
    return f"ix_{table}_hnsw_{digest}_{dimensions}"


def exact_distance(dimensions: int, vector: str = "embedding", query: str = ":vector") -> str:
    """The cosine distance of `vector` to `query` in single precision: what a search scores
    by (the stored vectors as they are)."""
    return f"({vector}::vector({dimensions}) <=> CAST({query} AS vector({dimensions})))"


def indexed_distance(dimensions: int, vector: str = "embedding", query: str = ":vector") -> str:
    """The cosine distance of `vector` to `query` as the HNSW index of `dimensions` orders
    it: an ORDER BY of this, under the index's model, can walk the index."""
    return f"({vector}::halfvec({dimensions}) <=> CAST({query} AS halfvec({dimensions})))"


def ensure_hnsw_index(connection: Connection, *, table: str, model: str, dimensions: int) -> bool:
    """The cosine HNSW index of `model`'s vectors of `dimensions` in `table` (made once,
    on the first batch the model stores); False if pgvector cannot index that size."""
    if table not in VECTOR_TABLES:
        raise ValueError(f"not a vector table: {table}")
    if not 0 < dimensions <= HNSW_MAX_DIMENSIONS:
        return False
    # DDL takes no bind parameters; the model is a quoted literal (standard strings).
    literal = "'" + model.replace("'", "''") + "'"
    name = hnsw_index_name(table, model, dimensions)
    connection.execute(text(_LOCK))
    connection.exec_driver_sql(
        f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw"
        f" ((embedding::halfvec({dimensions})) halfvec_cosine_ops) WHERE model = {literal}"
    )
    return True


def ensure_vector_schema_at(database_url: str) -> bool:
    """`ensure_vector_schema` in a transaction of its own (`driftless db upgrade`, after
    the migrations: a server that gained pgvector since 0018 ran gets its tables)."""
    engine = create_engine(sqlalchemy_url(database_url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            return ensure_vector_schema(connection)
    finally:
        engine.dispose()
