"""Reading and writing vectors: what is missing, storing a batch, and a scope's nearest.

Every query is plain SQL on the tables of schema.py (no model declares them: they exist
only with pgvector). A vector is written as pgvector's text form, `[0.1,0.2,...]`.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import text

from shared.embeddings.schema import (
    MESSAGE_VECTORS,
    TOPIC_VECTORS,
    ensure_hnsw_index,
    indexed_distance,
    vector_tables_exist,
)
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork

log = logging.getLogger(__name__)

# A "no" is asked again after this long, so a server that gains pgvector (and a
# `driftless db upgrade`) is seen without a restart; a "yes" holds for the process.
UNAVAILABLE_RECHECK_S = 60.0
# Characters of a message or topic embedded: embedding models take about 8k tokens, a
# token is at least a character or so, and a longer text must not fail its whole batch.
MAX_CHARS = 8000
# What a message's vector is made from: its speaker's name before its text, as a
# transcript writes a turn ("Caroline: …"), so a question naming who said it is near.
MESSAGE_TEXT = "coalesce(m.name || ': ', '') || m.content"
# What a topic's vector is made from, and the hash that says it is current.
TOPIC_TEXT = "concat_ws(E'\\n\\n', t.title, t.summary)"
TOPIC_HASH = f"md5({TOPIC_TEXT})"
# A message `m` with no vector of :model; a topic `t` (joined to its vector `v`) whose
# vector is missing, of another model, or made from another title and summary.
MESSAGE_MISSING = (
    "m.role <> 'tool' AND NOT EXISTS"
    " (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id AND v.model = :model)"
)
TOPIC_STALE = (
    "t.summarized_at IS NOT NULL AND t.summary IS NOT NULL AND (v.topic_id IS NULL"
    f" OR v.model <> :model OR v.source_hash <> {TOPIC_HASH})"
)

_available: dict[str, tuple[bool, float]] = {}  # database URL -> (answer, monotonic time)
# (database URL, table, model, dimensions) whose HNSW index this process made or saw.
_indexed: set[tuple[str, str, str, int]] = set()
# (database URL, model) -> the length of its vectors (None: none yet), monotonic time.
_dimensions: dict[tuple[str, str], tuple[int | None, float]] = {}


def _database(uow: UnitOfWork) -> str:
    return uow.session.get_bind().engine.url.render_as_string(hide_password=True)


def _ensure_index(uow: UnitOfWork, table: str, model: str, dimensions: int) -> None:
    # Before the transaction's INSERT: jobs storing a model's first vectors at once each
    # wait for the index's lock holding no lock on the table yet. After it, each held the
    # table's row lock that another's CREATE INDEX waits for, while waiting for its lock
    # (a deadlock, every job of a new model retried).
    key = (_database(uow), table, model, dimensions)
    _dimensions[key[0], model] = (dimensions, time.monotonic())
    if key not in _indexed:
        ensure_hnsw_index(uow.session.connection(), table=table, model=model, dimensions=dimensions)
        _indexed.add(key)


def vectors_available(uow: UnitOfWork) -> bool:
    """The vector tables exist on this database (cached per process; see above)."""
    key = _database(uow)
    cached = _available.get(key)
    if cached is not None and (cached[0] or time.monotonic() - cached[1] < UNAVAILABLE_RECHECK_S):
        return cached[0]
    available = vector_tables_exist(uow.session.connection())
    if not available and (cached is None or cached[0]):
        log.warning(
            "embeddings off: no vector tables (the PostgreSQL server has no 'vector'"
            " extension, pgvector); install it and run `driftless db upgrade`"
        )
    _available[key] = (available, time.monotonic())
    return available


def stored_dimensions(*, uow: UnitOfWork, model: str) -> int | None:
    """The length of `model`'s stored vectors (None: it has none yet): every vector of a
    model is of one length, which its HNSW index holds it to. Cached per process; a "none"
    is asked again after UNAVAILABLE_RECHECK_S (it may scan another model's rows)."""
    key = (_database(uow), model)
    cached = _dimensions.get(key)
    if cached is not None and (cached[0] or time.monotonic() - cached[1] < UNAVAILABLE_RECHECK_S):
        return cached[0]
    found = uow.session.execute(
        text(
            "SELECT coalesce((SELECT vector_dims(embedding) FROM message_vectors"
            "  WHERE model = :model LIMIT 1), (SELECT vector_dims(embedding)"
            "  FROM topic_vectors WHERE model = :model LIMIT 1))"
        ),
        {"model": model},
    ).scalar()
    _dimensions[key] = (None if found is None else int(found), time.monotonic())
    return _dimensions[key][0]


def vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


@dataclass(frozen=True)
class Pending:
    """A message (int id) or topic (UUID id) to embed, whose org's server embeds it."""

    id: int | uuid.UUID
    org_id: uuid.UUID
    text: str
    source_hash: str | None = None  # topics: the hash of the text embedded


def pending_messages(
    *, uow: UnitOfWork, model: str, limit: int, after_id: int = 0, through_id: int | None = None,
    ids: Sequence[int] | None = None, older_than_s: float = 0.0, texts: bool = True,
) -> list[Pending]:  # fmt: skip
    """User and assistant messages after `after_id` (through `through_id`; or among
    `ids`) with no vector of `model`, oldest first: a range scan of the primary key.
    `texts=False` leaves each text empty (the planner needs only ids and orgs)."""
    content = f"left({MESSAGE_TEXT}, :chars)" if texts else "''"
    rows = uow.session.execute(
        text(
            f"SELECT m.id, s.org_id, {content} FROM messages m"
            f" JOIN sessions s ON s.id = m.session_id"
            f" WHERE m.id > :after AND (CAST(:through AS bigint) IS NULL OR m.id <= :through)"
            f" AND (CAST(:ids AS bigint[]) IS NULL OR m.id = ANY(CAST(:ids AS bigint[])))"
            f" AND m.created_at <= now() - make_interval(secs => :older)"
            f" AND {MESSAGE_MISSING} ORDER BY m.id LIMIT :limit"
        ),
        {"after": after_id, "through": through_id, "ids": None if ids is None else list(ids),
         "older": older_than_s, "model": model, "limit": limit, "chars": MAX_CHARS},
    ).all()  # fmt: skip
    return [Pending(row[0], row[1], row[2]) for row in rows]


def oldest_missing_message(
    *, uow: UnitOfWork, model: str, after_id: int
) -> tuple[int, dt.datetime] | None:
    """The first message after `after_id` with no vector of `model` (id, created_at): a
    walk of the primary key that stops at it, so it costs what was embedded since."""
    row = uow.session.execute(
        text(
            f"SELECT m.id, m.created_at FROM messages m WHERE m.id > :after AND {MESSAGE_MISSING}"
            " ORDER BY m.id LIMIT 1"
        ),
        {"after": after_id, "model": model},
    ).first()
    return None if row is None else (int(row[0]), row[1])


def settled_message_id(*, uow: UnitOfWork, after_id: int, settle_s: float) -> int | None:
    """The newest message after `after_id` posted more than `settle_s` ago (None: none):
    the sweep's cursor does not pass messages a transaction still in flight may precede."""
    found = uow.session.execute(
        text(
            "SELECT max(id) FROM messages WHERE id > :after"
            " AND created_at < now() - make_interval(secs => :settle)"
        ),
        {"after": after_id, "settle": settle_s},
    ).scalar()
    return None if found is None else int(found)


TopicCursor = tuple[dt.datetime, uuid.UUID]  # (summarized_at, id) of the last topic passed
TOPIC_START: TopicCursor = (dt.datetime(1970, 1, 1, tzinfo=dt.UTC), uuid.UUID(int=0))


def pending_topics(
    *, uow: UnitOfWork, model: str, limit: int, after: TopicCursor = TOPIC_START,
    through: TopicCursor | None = None, ids: Sequence[uuid.UUID] | None = None,
    older_than_s: float = 0.0, texts: bool = True,
) -> list[tuple[Pending, TopicCursor]]:  # fmt: skip
    """Summarized topics after the cursor (through `through`; or among `ids`) whose
    vector is missing, of another model, or made from another title and summary.
    `texts=False` leaves each text and hash empty (the planner needs only ids and orgs)."""
    end = through or (dt.datetime.max.replace(tzinfo=dt.UTC), uuid.UUID(int=2**128 - 1))
    content = f"left({TOPIC_TEXT}, :chars), {TOPIC_HASH}" if texts else "'', ''"
    rows = uow.session.execute(
        text(
            f"SELECT t.id, s.org_id, {content}, t.summarized_at"
            f" FROM topics t JOIN sessions s ON s.id = t.session_id"
            f" LEFT JOIN topic_vectors v ON v.topic_id = t.id"
            f" WHERE {TOPIC_STALE} AND (t.summarized_at, t.id) > (:after_at, :after_id)"
            f" AND (t.summarized_at, t.id) <= (:end_at, :end_id)"
            f" AND (CAST(:ids AS uuid[]) IS NULL OR t.id = ANY(CAST(:ids AS uuid[])))"
            f" AND t.summarized_at <= now() - make_interval(secs => :older)"
            f" ORDER BY t.summarized_at, t.id LIMIT :limit"
        ),
        {"after_at": after[0], "after_id": after[1], "end_at": end[0], "end_id": end[1],
         "ids": None if ids is None else list(ids), "older": older_than_s, "model": model,
         "limit": limit, "chars": MAX_CHARS},
    ).all()  # fmt: skip
    return [(Pending(row[0], row[1], row[2], row[3]), (row[4], row[0])) for row in rows]


def settled_topic(*, uow: UnitOfWork, after: TopicCursor, settle_s: float) -> TopicCursor | None:
    """The newest topic cursor after `after` summarized more than `settle_s` ago."""
    row = uow.session.execute(
        text(
            "SELECT summarized_at, id FROM topics"
            " WHERE summarized_at IS NOT NULL AND (summarized_at, id) > (:at, :id)"
            " AND summarized_at < now() - make_interval(secs => :settle)"
            " ORDER BY summarized_at DESC, id DESC LIMIT 1"
        ),
        {"at": after[0], "id": after[1], "settle": settle_s},
    ).first()
    return None if row is None else (row[0], row[1])


def store_message_vectors(
    *, uow: UnitOfWork, model: str, vectors: Sequence[tuple[int, Sequence[float]]]
) -> int:
    """Store each message's vector of `model`, replacing another model's; a message
    erased meanwhile is skipped, a vector of the same model kept. Rows written."""
    if not vectors:
        return 0
    _ensure_index(uow, MESSAGE_VECTORS, model, len(vectors[0][1]))
    written = uow.session.execute(
        text(
            "INSERT INTO message_vectors (message_id, session_id, model, embedding)"
            " SELECT m.id, m.session_id, :model, CAST(n.e AS vector)"
            " FROM unnest(CAST(:ids AS bigint[]), CAST(:embeddings AS text[])) AS n(id, e)"
            " JOIN messages m ON m.id = n.id"
            " ON CONFLICT (message_id) DO UPDATE SET model = excluded.model,"
            "  embedding = excluded.embedding, created_at = now()"
            " WHERE message_vectors.model <> excluded.model"
        ),
        {"model": model, "ids": [i for i, _ in vectors],
         "embeddings": [vector_literal(v) for _, v in vectors]},
    ).rowcount  # type: ignore[attr-defined]  # fmt: skip
    return int(written)


def store_topic_vectors(
    *, uow: UnitOfWork, model: str, vectors: Sequence[tuple[Pending, Sequence[float]]]
) -> int:
    """Store each topic's vector of `model` with the hash of what it was made from,
    replacing an older one; a topic deleted meanwhile is skipped. Rows written."""
    if not vectors:
        return 0
    _ensure_index(uow, TOPIC_VECTORS, model, len(vectors[0][1]))
    written = uow.session.execute(
        text(
            "INSERT INTO topic_vectors (topic_id, session_id, model, source_hash, embedding)"
            " SELECT t.id, t.session_id, :model, n.h, CAST(n.e AS vector)"
            " FROM unnest(CAST(:ids AS uuid[]), CAST(:hashes AS text[]),"
            "  CAST(:embeddings AS text[])) AS n(id, h, e)"
            " JOIN topics t ON t.id = n.id"
            " ON CONFLICT (topic_id) DO UPDATE SET model = excluded.model,"
            "  source_hash = excluded.source_hash, embedding = excluded.embedding,"
            "  created_at = now()"
            " WHERE (topic_vectors.model, topic_vectors.source_hash)"
            "  IS DISTINCT FROM (excluded.model, excluded.source_hash)"
        ),
        {"model": model, "ids": [p.id for p, _ in vectors],
         "hashes": [p.source_hash for p, _ in vectors],
         "embeddings": [vector_literal(v) for _, v in vectors]},
    ).rowcount  # type: ignore[attr-defined]  # fmt: skip
    return int(written)


def missing_messages(*, uow: UnitOfWork, model: str) -> int:
    """User and assistant messages with no vector of `model` (a full count: the CLI's)."""
    query = f"SELECT count(*) FROM messages m WHERE {MESSAGE_MISSING}"
    return int(uow.session.execute(text(query), {"model": model}).scalar_one())


def missing_topics(*, uow: UnitOfWork, model: str) -> int:
    """Summarized topics whose vector is missing or stale (a full count: the CLI's)."""
    query = (
        "SELECT count(*) FROM topics t LEFT JOIN topic_vectors v ON v.topic_id = t.id"
        f" WHERE {TOPIC_STALE}"
    )
    return int(uow.session.execute(text(query), {"model": model}).scalar_one())


def missing_message_ids(*, uow: UnitOfWork, model: str, after_id: int, limit: int) -> list[int]:
    """The next page of message ids without a vector of `model` (a backfill's batch)."""
    query = f"SELECT m.id FROM messages m WHERE m.id > :after AND {MESSAGE_MISSING}"
    return list(
        uow.session.scalars(
            text(query + " ORDER BY m.id LIMIT :limit"),
            {"after": after_id, "model": model, "limit": limit},
        )
    )


def stale_topic_ids(
    *, uow: UnitOfWork, model: str, after_id: uuid.UUID, limit: int
) -> list[uuid.UUID]:
    """The next page of topic ids whose vector is missing or stale (a backfill's batch)."""
    query = (
        "SELECT t.id FROM topics t LEFT JOIN topic_vectors v ON v.topic_id = t.id"
        f" WHERE t.id > :after AND {TOPIC_STALE}"
    )
    return list(
        uow.session.scalars(
            text(query + " ORDER BY t.id LIMIT :limit"),
            {"after": after_id, "model": model, "limit": limit},
        )
    )


@dataclass(frozen=True)
class Near:
    id: int | uuid.UUID
    distance: float  # cosine distance: 0 same direction, 2 opposite


def nearest_messages(
    *, uow: UnitOfWork, model: str, query: Sequence[float], session_ids: Sequence[uuid.UUID],
    limit: int,
) -> list[Near]:  # fmt: skip
    """The messages of these sessions nearest to `query` among `model`'s vectors."""
    return _nearest(uow, MESSAGE_VECTORS, "message_id", model, query, session_ids, limit)


def nearest_topics(
    *, uow: UnitOfWork, model: str, query: Sequence[float], session_ids: Sequence[uuid.UUID],
    limit: int,
) -> list[Near]:  # fmt: skip
    """The topics of these sessions nearest to `query` among `model`'s vectors."""
    return _nearest(uow, TOPIC_VECTORS, "topic_id", model, query, session_ids, limit)


def _nearest(
    uow: UnitOfWork, table: str, key: str, model: str, query: Sequence[float],
    session_ids: Sequence[uuid.UUID], limit: int,
) -> list[Near]:  # fmt: skip
    # Spelled as the model's HNSW index (schema.ensure_hnsw_index), so the planner may
    # use it; with a scope's few sessions it may prefer the session index and sort.
    dimensions = len(query)
    distance = indexed_distance(dimensions, query=":query")
    rows = uow.session.execute(
        text(
            f"SELECT {key}, {distance} FROM {table}"
            f" WHERE model = :model AND session_id = ANY(CAST(:sessions AS uuid[]))"
            f" AND vector_dims(embedding) = {dimensions}"
            f" ORDER BY {distance} LIMIT :limit"
        ),
        {"query": vector_literal(query), "model": model, "sessions": list(session_ids),
         "limit": limit},
    ).all()  # fmt: skip
    return [Near(row[0], float(row[1])) for row in rows]


def embeddings_status(*, new_uow: Callable[[], UnitOfWork], settings: Settings) -> str:
    """What /readyz says of recall by meaning: `ok`, or `off: <why>` (never a failure)."""
    if settings.embeddings == "none":
        return "off: DRIFTLESS_EMBEDDINGS=none"
    try:
        with new_uow() as uow:
            available = vectors_available(uow)
    except Exception as exc:  # readiness reports; the database check says what failed
        return f"unknown: {type(exc).__name__}"
    if not available:
        return "off: the PostgreSQL server has no 'vector' extension (pgvector)"
    return "ok"
