"""The meaning half of a hybrid search: a scope's messages and topics nearest to the
query's vector, as keys and scores like the words' (ranking.scores), found beside them
on a second connection when the pool has one to give (`beside`).

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

import concurrent.futures
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import Row
from sqlalchemy.pool import QueuePool

from shared.embeddings.schema import exact_distance, indexed_distance
from shared.embeddings.store import vector_literal

# How many of the scope's nearest messages, and of its nearest topics, the fusion considers
# beside the words' best (service.WORDS_POOL): the z-scores of shared/search/fusion.py are
# over all of them. LoCoMo's dev split, through the running system, with the words' 200:
# recall@10 0.783 with 100, 0.785 with 200 (multi-hop 0.453 / 0.459, open-domain 0.474
# both); 100 a side costs open-domain (0.447). A walk for 100 reads half what one for
# 200 does: a 100,000-message scope's hybrid search p95 43 ms against 64
# (bench/hybrid_speed.py, docs/benchmarks.md).
NEAREST = 100
# Whether a scope's nearest messages are found by walking the HNSW index rather than by
# sorting the scope's vectors (bench/hybrid_speed.py, 384 dimensions, 322,000 vectors):
# sorting costs 1.4–3 µs a scope vector (100,000: 140–320 ms); a walk filtered to the
# scope visits about NEAREST / share entries at about 50 µs each (a third of the table:
# 20–60 ms; 6 %: 120 ms against 24 ms sorted). So a scope walks when its vectors S and
# the table's T give S × S / T >= WALK_COST_RATIO × NEAREST, and S is at least
# WALK_MIN_SHARE of T (an iterative scan gives up after hnsw.max_scan_tuples, 20,000
# entries: a walk must fill its pool well before) and WALK_MIN_VECTORS.
WALK_COST_RATIO = 35
WALK_MIN_SHARE = 0.03
WALK_MIN_VECTORS = 10_000
# Entries a walk keeps in its candidate list (pgvector's default 40 takes more passes).
WALK_EF_SEARCH = 100
# How long a process keeps a scope's walk-or-sort answer (the count costs 3.5 ms at p50,
# 8 at p95, at a 100,000-message scope), and for how many scopes at most.
WALK_DECISION_S = 60.0
WALK_DECISIONS_KEPT = 10_000
_walk_decisions: dict[tuple[object, object, object], tuple[bool, float]] = {}
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
    exact = exact_distance(dimensions, "v.embedding")
    # A walk orders as the HNSW index does (half precision); a sort, exactly.
    distance = indexed_distance(dimensions, "v.embedding") if walk else exact
    scope = _SCOPE
    # A walk's scope test is a filter on the HNSW scan (`IS TRUE` keeps the planner from
    # the session index, which its estimate of vector_dims would always prefer).
    in_scope = f"(v.session_id IN ({scope})) IS TRUE" if walk else f"v.session_id IN ({scope})"
    return f"""
    WITH near_messages AS (
        SELECT v.message_id, {distance} AS distance
          FROM message_vectors v
         WHERE :messages AND v.model = :model AND vector_dims(v.embedding) = {dimensions}
           AND {in_scope}
         ORDER BY distance
         LIMIT :pool
    ),
    near_topics AS (  -- a scope's topics are few: always sorted
        SELECT v.topic_id, {exact} AS distance
          FROM topic_vectors v
         WHERE :topics AND v.model = :model AND vector_dims(v.embedding) = {dimensions}
           AND v.session_id IN ({scope})
         ORDER BY distance
         LIMIT :pool
    )
    SELECT 'message' AS kind, near.message_id, NULL AS topic_id, 1 - near.distance AS score
      FROM near_messages near
      JOIN messages m ON m.id = near.message_id
      JOIN topics t ON t.id = m.topic_id
     WHERE :deprecated OR NOT t.deprecated
    UNION ALL
    SELECT 'topic', NULL, near.topic_id, 1 - near.distance
      FROM near_topics near
      JOIN topics t ON t.id = near.topic_id
     WHERE :deprecated OR NOT t.deprecated
    """


def topic_similarities(
    *, connection: Connection, topic_ids: Sequence[object], vector: Sequence[float], model: str
) -> dict[object, float]:
    """The cosine similarity to `vector` of each of these topics that has a vector of
    `model`: the words' topics the nearest did not bring (every message candidate gets
    its cosine with its words' scores, ranking.scores)."""
    if not topic_ids:
        return {}
    dimensions = len(vector)
    rows = connection.execute(
        text(
            f"SELECT topic_id, 1 - {exact_distance(dimensions)} FROM topic_vectors"
            " WHERE topic_id = ANY(CAST(:ids AS uuid[])) AND model = :model"
            f" AND vector_dims(embedding) = {dimensions}"
        ),
        {"ids": list(topic_ids), "vector": vector_literal(vector), "model": model},
    )
    return {row[0]: float(row[1]) for row in rows}


def nearest(
    *, connection: Connection, params: dict[str, object], vector: Sequence[float], model: str,
    own_transaction: bool = False,
) -> Sequence[Row[tuple[object, ...]]]:  # fmt: skip
    """The scope's nearest messages and topics (by `params`, the lexical statement's), each
    scored by its cosine similarity to `vector` (1: same direction). With
    `own_transaction`, the planner settings it makes are left for the transaction's end."""
    # Within this transaction only. The scope's vectors are read by an index, never by a
    # scan of the table (the planner's estimate of vector_dims makes one look cheap: a
    # 20,000-message scope took 137 ms so, 24 ms by its sessions). A walk of the HNSW index
    # goes on until it has found enough of the scope's vectors (pgvector 0.8's iterative
    # scan); else the sessions' index, as a bitmap, is the only way (HNSW has no bitmap).
    settings = ["enable_seqscan = off", "hnsw.iterative_scan = relaxed_order"]
    walk = bool(params["messages"]) and _scope_walks(connection, params)
    settings += (
        ["enable_bitmapscan = off", f"hnsw.ef_search = {WALK_EF_SEARCH}"]
        if walk
        else ["enable_indexscan = off"]
    )
    connection.exec_driver_sql("; ".join(f"SET LOCAL {setting}" for setting in settings))
    rows = connection.execute(
        text(_statement(len(vector), walk=walk)),
        {**params, "vector": vector_literal(vector), "model": model, "pool": NEAREST},
    ).all()
    if own_transaction:
        return rows
    # The rest of the transaction (the words' statements) plans as it always did.
    connection.exec_driver_sql(
        "; ".join(f"SET LOCAL {setting.split(' = ')[0]} TO DEFAULT" for setting in settings)
    )
    return rows


@contextmanager
def beside(
    connection: Connection, *, params: dict[str, object], vector: Sequence[float], model: str
) -> Iterator[Callable[[], Sequence[Row[tuple[object, ...]]]]]:
    """`nearest`, found on another connection while the caller runs its own statements
    on `connection` (the words'), when the pool can give one at once; else on
    `connection` itself, when asked for. Yields the function that answers it.

    Both sides are CPU work in two server processes, so side by side a hybrid search
    takes about the longer of the two instead of their sum (bench/hybrid_speed.py). The
    second connection is taken only while fewer than the pool's size are out (an idle one,
    or a new one the pool keeps): a search that waited for a second connection while
    holding its first could, with every connection held so, wait out the pool's timeout;
    this way the overflow stays for the requests' own."""
    engine = connection.engine
    pool = engine.pool
    if not isinstance(pool, QueuePool) or pool.checkedout() >= pool.size():
        yield lambda: nearest(connection=connection, params=params, vector=vector, model=model)
        return
    found = _threads().submit(_nearest_apart, engine, params, vector, model)
    try:
        yield found.result
    finally:
        concurrent.futures.wait([found])  # its connection is back in the pool


def _nearest_apart(
    engine: Engine, params: dict[str, object], vector: Sequence[float], model: str
) -> Sequence[Row[tuple[object, ...]]]:
    with engine.connect() as other, other.begin():
        return nearest(
            connection=other, params=params, vector=vector, model=model, own_transaction=True
        )


@functools.cache
def _threads() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that run `beside`'s other side (greenlets in the gevent web, which
    patches threading before this is first made): one per connection of a pool is plenty."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="nearest")


def _scope_walks(connection: Connection, params: dict[str, object]) -> bool:
    """`_walks`, remembered for WALK_DECISION_S per scope in this process: a scope's size
    moves slowly, and either way finds the same nearest (a stale answer costs time only)."""
    scope = (params["org"], params["agent"], params["user"])
    now = time.monotonic()
    known = _walk_decisions.get(scope)
    if known is not None and now - known[1] < WALK_DECISION_S:
        return known[0]
    walks = _walks(connection, params)
    if len(_walk_decisions) >= WALK_DECISIONS_KEPT:
        _walk_decisions.clear()  # a crude bound: rebuilt at a few ms a scope
    _walk_decisions[scope] = (walks, now)
    return walks


def _walks(connection: Connection, params: dict[str, object]) -> bool:
    """The scope's nearest messages are found by walking the HNSW index (see above)."""
    limits = {"min_vectors": WALK_MIN_VECTORS, "min_share": WALK_MIN_SHARE,
              "ratio": WALK_COST_RATIO, "pool": NEAREST}  # fmt: skip
    return bool(connection.execute(text(_WALKS), {**params, **limits}).scalar())
