"""The meaning half of a hybrid search: a scope's messages and topics nearest to the
query's vector, as rows of the same shape as the lexical statement's (ranking.SEARCH).

Vectors are pgvector's, written by the workers (shared/embeddings/). Only a model's own
vectors of the query's dimension are compared, spelled as that model's HNSW expression
index (shared/embeddings/schema.py). How a scope's nearest are found is chosen here, not
left to the planner, whose estimate of `vector_dims(…) = N` (0.5 % of rows) made it sort
every vector of a 100,000-message scope (300 ms; bench/hybrid_speed.py): a small scope's
vectors, or a small share of the model's, are read by the session index and sorted
(exact); a large scope that is a large share of them is found by walking the HNSW index,
filtered to the scope, with `hnsw.iterative_scan` so that the walk goes on past other
scopes' entries until the pool is full (pgvector 0.8).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.engine import Row

from shared.embeddings.store import vector_literal
from shared.infra.db.uow import UnitOfWork
from shared.search import ranking

# How many of the scope's nearest messages and topics the fusion considers, and of the
# words' best: the z-scores of shared/search/fusion.py are over these (LoCoMo's dev split:
# recall@10 0.744 with 20 a side, 0.773 with 100, 0.777 with 200, 0.774 with 1,000).
POOL = 200
# Whether a scope's nearest messages are found by walking the HNSW index rather than by
# sorting the scope's vectors (bench/hybrid_speed.py, 384 dimensions, 322,000 vectors):
# sorting costs 1.4–3 µs a scope vector (100,000: 140–320 ms); a walk filtered to the
# scope visits about POOL / share entries at about 50 µs each (a third of the table:
# 20–60 ms; 6 %: 120 ms against 24 ms sorted). So a scope walks when its vectors S and
# the table's T give S × S / T >= WALK_COST_RATIO × POOL, and S is at least
# WALK_MIN_SHARE of T (an iterative scan gives up after hnsw.max_scan_tuples, 20,000
# entries: a walk must fill its pool well before) and WALK_MIN_VECTORS.
WALK_COST_RATIO = 35
WALK_MIN_SHARE = 0.03
WALK_MIN_VECTORS = 10_000
# Entries a walk keeps in its candidate list (pgvector's default 40 takes more passes).
WALK_EF_SEARCH = 100
_SCOPE = "SELECT id FROM sessions WHERE org_id = :org AND agent_id = :agent AND user_id = :user"
# True if the scope has enough message vectors to walk (see above): counted on the session
# index no further than that, against the table's rows as the planner last counted them.
_WALKS = f"""
    WITH walk AS (
        SELECT ceil(greatest(:min_vectors, :min_share * reltuples,
                             sqrt(:ratio * :pool * greatest(reltuples, 0))))::bigint AS enough
          FROM pg_class WHERE oid = 'message_vectors'::regclass
    )
    SELECT count(*) >= (SELECT enough FROM walk)
      FROM (SELECT 1 FROM message_vectors WHERE session_id IN ({_SCOPE})
             LIMIT (SELECT enough FROM walk)) AS scope
"""


def _statement(dimensions: int, *, walk: bool = False) -> str:
    distance = f"(v.embedding::vector({dimensions}) <=> CAST(:vector AS vector({dimensions})))"
    scope = _SCOPE
    # A walk's scope test is a filter on the HNSW scan (`IS TRUE` keeps the planner from
    # the session index, which its estimate of vector_dims would always prefer).
    in_scope = f"(v.session_id IN ({scope})) IS TRUE" if walk else f"v.session_id IN ({scope})"
    return f"""
    WITH query AS (SELECT {ranking.ANY_WORD} AS q),
    near_messages AS (
        SELECT v.message_id, {distance} AS distance
          FROM message_vectors v
         WHERE :messages AND v.model = :model AND vector_dims(v.embedding) = {dimensions}
           AND {in_scope}
         ORDER BY distance
         LIMIT :pool
    ),
    near_topics AS (
        SELECT v.topic_id, {distance} AS distance
          FROM topic_vectors v
         WHERE :topics AND v.model = :model AND vector_dims(v.embedding) = {dimensions}
           AND v.session_id IN ({scope})
         ORDER BY distance
         LIMIT :pool
    )
    SELECT 'message' AS kind, m.id AS message_id, m.session_id, m.topic_id, t.title,
           {ranking.snippet("m.content")} AS snippet,
           t.keep_in_memory, t.deprecated, 1 - near.distance AS score, m.created_at
      FROM near_messages near
      JOIN messages m ON m.id = near.message_id
      JOIN topics t ON t.id = m.topic_id
     WHERE :deprecated OR NOT t.deprecated
    UNION ALL
    SELECT 'topic', NULL, t.session_id, t.id, t.title,
           {ranking.snippet("coalesce(t.summary, t.title, '')")},
           t.keep_in_memory, t.deprecated, 1 - near.distance, t.created_at
      FROM near_topics near
      JOIN topics t ON t.id = near.topic_id
     WHERE :deprecated OR NOT t.deprecated
    """


def similarities(
    *, uow: UnitOfWork, keys: Sequence[tuple[str, object]], vector: Sequence[float], model: str
) -> dict[tuple[str, object], float]:
    """The cosine similarity to `vector` of each message and topic among `keys` (kind, id)
    that has a vector of `model`: the words' candidates the nearest did not bring."""
    dimensions = len(vector)
    distance = f"(embedding::vector({dimensions}) <=> CAST(:vector AS vector({dimensions})))"
    found: dict[tuple[str, object], float] = {}
    for kind, table, column, cast in (
        ("message", "message_vectors", "message_id", "bigint[]"),
        ("topic", "topic_vectors", "topic_id", "uuid[]"),
    ):
        ids = [key_id for key_kind, key_id in keys if key_kind == kind]
        if not ids:
            continue
        rows = uow.connection().execute(
            text(
                f"SELECT {column}, 1 - {distance} FROM {table}"
                f" WHERE {column} = ANY(CAST(:ids AS {cast})) AND model = :model"
                f" AND vector_dims(embedding) = {dimensions}"
            ),
            {"ids": ids, "vector": vector_literal(vector), "model": model},
        )
        found.update({(kind, row[0]): float(row[1]) for row in rows})
    return found


def nearest(
    *, uow: UnitOfWork, params: dict[str, object], vector: Sequence[float], model: str
) -> Sequence[Row[tuple[object, ...]]]:
    """The scope's nearest messages and topics (by `params`, the lexical statement's), each
    scored by its cosine similarity to `vector` (1: same direction)."""
    connection = uow.connection()
    # Within this transaction only. The scope's vectors are read by an index, never by a
    # scan of the table (the planner's estimate of vector_dims makes one look cheap: a
    # 20,000-message scope took 137 ms so, 24 ms by its sessions). A walk of the HNSW index
    # goes on until it has found enough of the scope's vectors (pgvector 0.8's iterative
    # scan); else the sessions' index, as a bitmap, is the only way (HNSW has no bitmap).
    settings = ["enable_seqscan = off", "hnsw.iterative_scan = relaxed_order"]
    walk = bool(params["messages"]) and _walks(uow, params)
    settings += (
        ["enable_bitmapscan = off", f"hnsw.ef_search = {WALK_EF_SEARCH}"]
        if walk
        else ["enable_indexscan = off"]
    )
    for setting in settings:
        connection.execute(text(f"SET LOCAL {setting}"))
    rows = connection.execute(
        text(_statement(len(vector), walk=walk)),
        {**params, "vector": vector_literal(vector), "model": model, "pool": POOL},
    ).all()
    # The rest of the transaction (the words' statement) plans as it always did.
    for setting in settings:
        connection.execute(text(f"SET LOCAL {setting.split(' = ')[0]} TO DEFAULT"))
    return rows


def _walks(uow: UnitOfWork, params: dict[str, object]) -> bool:
    """The scope's nearest messages are found by walking the HNSW index (see above)."""
    limits = {"min_vectors": WALK_MIN_VECTORS, "min_share": WALK_MIN_SHARE,
              "ratio": WALK_COST_RATIO, "pool": POOL}  # fmt: skip
    return bool(uow.connection().execute(text(_WALKS), {**params, **limits}).scalar())
