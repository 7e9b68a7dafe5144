"""bench/hybrid_speed ([3.3]): hybrid search at a 100,000-message scope beside others: its
speed against lexical on the same queries, and whether the vector side keeps to the scope.

1. **A PostgreSQL with pgvector.** The embedded server (shared/infra/embedded.py:
   PostgreSQL 16, pgvector 0.8) in a temporary directory, stopped and removed at the end;
   migrated, so the vector tables are there. Redis is the machine's (bench/common.py).
2. **The scopes.** bench/search_speed.py's made-up text, posted through the API: one
   scope of `--messages`, two of `--other-messages` beside it, and small scopes of
   `--small` messages each (by default 50, 2,000 and 20,000).
3. **Vectors, without a provider.** Every message and summarized topic gets a 384-dimension
   vector (all-MiniLM-L6-v2's size), stored by shared/embeddings/store.py as the workers
   store theirs: a hashed bag of the text's content words (each word adds ±1 to
   `BUCKETS_PER_WORD` of the 384 buckets, chosen by its sha256; stop-words skipped; unit
   length), so texts that share words are near and a query has real nearest neighbours.
   The messages' HNSW index is built once they are all in (as `ensure_hnsw_index` makes
   it), not grown row by row, which only saves time here. Then VACUUM ANALYZE.
4. **Search, in process** (the service function: PostgreSQL and the domain, no HTTP,
   which adds 2–4 ms: docs/benchmarks.md [2.5]). For each of `--searches` queries (a
   third each of common, mixed and rare words) hybrid and lexical run in turn, the
   default call (topics and messages, limit 10). The query's vector comes from a stub
   QueryVectors that returns it precomputed, so the provider's time is zero here; the
   stand-in's own time is reported apart, and a real provider's is bounded by its
   deadline and counted by `driftless_query_embeddings_total`. Every hybrid hit must
   belong to the scope searched (asserted). A hybrid search's time is also given by its
   statements (words, the walk's check, the nearest, the words' candidates' cosines).
5. **The vector side alone**, `meaning.nearest` for messages, per strategy: as built
   (meaning.py chooses: an HNSW walk with `hnsw.iterative_scan = relaxed_order` for a
   large scope, else the scope's vectors sorted), meaning's statement as an exact sort
   (the scope's vectors by the session index) and as an HNSW walk at several
   `hnsw.ef_search`. For each: latency, the fewest
   rows returned (a full pool is min(NEAREST, the scope's vectors)) and recall against the
   exact scan.
   `--explain` prints EXPLAIN (ANALYZE, BUFFERS) of the statement as built for the big
   and each small scope to stderr.

    .venv/bin/python -m bench.hybrid_speed [--messages 100000] [--other-messages 100000]
        [--small 50,2000,20000] [--searches 300] [--strategy-searches 40] [--explain]
        [--shared-buffers 2GB] [--keep DIR]

The server gets `--shared-buffers` (default 2GB: the HNSW index and the vectors' heap fit,
as pgvector advises for a deployment; docs/operations.md), set before the build and
restarted for it. `--keep DIR` keeps the server's data in DIR; a later run with the same
DIR reuses its scopes and vectors (the build takes 10 minutes) and only searches.

The last line is machine-readable: `hybrid_p50_ms=… hybrid_p95_ms=… lexical_p95_ms=…
scope_ok=… full_pool=…` (the big scope, in process; full_pool: the vector side as built
came back with min(NEAREST, the scope's vectors) rows for every scope and query).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy.exc
from sqlalchemy import event, text

from bench.common import (
    BenchEnv,
    arguments,
    bench_env,
    machine,
    percentile,
    reused_bench_env,
)
from bench.http_throughput import web_server
from bench.search_speed import Query, Vocabulary, build_scope, queries, settle
from shared.embeddings.schema import MESSAGE_VECTORS, ensure_hnsw_index, hnsw_index_name
from shared.embeddings.store import (
    TOPIC_HASH,
    TOPIC_TEXT,
    Pending,
    store_message_vectors,
    store_topic_vectors,
    vector_literal,
)
from shared.llm.text import STOPWORDS
from shared.memory.scope import Scope
from shared.search import meaning, service
from shared.search.service import SearchQuery, search
from tests.vectors import pgvector_server

AGENT = "speed"  # bench/search_speed.py's build_scope posts as this agent
MODEL = "bench-hashed-bag-384"
DIMENSIONS = 384
BUCKETS_PER_WORD = 8
STORE_BATCH = 5000
# The HNSW index of 322,000 vectors is about 585 MB and the vectors' heap 472 MB: pgvector
# asks that the index fit in shared_buffers, as a deployment's would (docs/operations.md);
# the embedded server's own default is 128 MB.
SHARED_BUFFERS = "2GB"
_WORD = re.compile(r"\w+")


# --- the stand-in's vectors ------------------------------------------------------------


@functools.lru_cache(maxsize=100_000)
def _buckets(word: str) -> tuple[tuple[int, float], ...]:
    digest = hashlib.sha256(word.encode()).digest()
    chunks = (digest[3 * i : 3 * i + 3] for i in range(BUCKETS_PER_WORD))
    return tuple(
        ((int.from_bytes(c, "big") >> 1) % DIMENSIONS, 1.0 if c[-1] & 1 else -1.0) for c in chunks
    )


def embedding(text_: str) -> list[float]:
    """Unit length, 384 long; a text of stop-words only gets one bucket of its own hash."""
    vector = [0.0] * DIMENSIONS
    for word in _WORD.findall(text_.lower()):
        if word not in STOPWORDS:
            for bucket, sign in _buckets(word):
                vector[bucket] += sign
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:
        digest = hashlib.sha256(text_.encode()).digest()
        vector[int.from_bytes(digest[:8], "big") % DIMENSIONS] = norm = 1.0
    return [x / norm for x in vector]


@dataclass
class StubVectors:
    """A QueryVectors whose vectors were made before the clock started: no provider time."""

    vectors: dict[str, list[float]]
    model: str = MODEL

    def vector(
        self, text_: str, *, org_id: uuid.UUID | None, dimensions: int | None = None
    ) -> list[float] | None:
        return self.vectors[text_]


def store_vectors(env: BenchEnv) -> None:
    """Every message's and summarized topic's vector, through the store; the messages'
    HNSW index dropped after the first batch and built once at the end."""
    index = hnsw_index_name(MESSAGE_VECTORS, MODEL, DIMENSIONS)
    after = 0
    while True:
        with env.uow() as uow:
            rows = uow.session.execute(
                text("SELECT id, content FROM messages WHERE id > :after AND role <> 'tool'"
                     " ORDER BY id LIMIT :limit"),
                {"after": after, "limit": STORE_BATCH},
            ).all()  # fmt: skip
            if not rows:
                break
            store_message_vectors(
                uow=uow, model=MODEL, vectors=[(row[0], embedding(row[1])) for row in rows]
            )
            if after == 0:
                uow.session.execute(text(f"DROP INDEX {index}"))
            uow.commit()
        after = rows[-1][0]
    with env.uow() as uow:
        topics = uow.session.execute(
            text(f"SELECT t.id, s.org_id, {TOPIC_TEXT}, {TOPIC_HASH} FROM topics t"
                 " JOIN sessions s ON s.id = t.session_id WHERE t.summary IS NOT NULL")
        ).all()  # fmt: skip
        store_topic_vectors(
            uow=uow, model=MODEL,
            vectors=[(Pending(r[0], r[1], r[2], r[3]), embedding(r[2])) for r in topics],
        )  # fmt: skip
        uow.commit()
    with env.engine.begin() as connection:
        connection.execute(text("SET LOCAL maintenance_work_mem = '2GB'"))
        ensure_hnsw_index(connection, table=MESSAGE_VECTORS, model=MODEL, dimensions=DIMENSIONS)
    with env.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE message_vectors, topic_vectors"))


# --- search ------------------------------------------------------------------------------


@dataclass
class Timings:
    hybrid: list[float] = field(default_factory=list)
    lexical: list[float] = field(default_factory=list)
    hits_outside: int = 0
    lexical_modes: set[str] = field(default_factory=set)
    # A hybrid search's time by statement: its words, the walk's check, the nearest, the
    # cosines of the words' candidates, the rest (settings, the search slot's).
    parts: dict[str, list[float]] = field(default_factory=dict)


def _part(statement: str) -> str:
    if "near_messages AS" in statement:
        return "nearest (meaning.nearest's statement)"
    if "WITH walk AS" in statement:
        return "walk or sort (meaning._walks)"
    if "message_ids" in statement:
        return "the fused hits' rows (ranking.HITS)"
    if "= ANY(CAST(" in statement and "1 - (embedding" in statement:
        return "cosines of the words' topics"
    if "ts_rank" in statement:
        return "words (ranking.scores: pool, cosines, neighbours)"
    return "other statements"


@contextmanager
def parts_of(env: BenchEnv, into: dict[str, float]) -> Iterator[None]:
    """Each statement's time meanwhile, added up by `_part`."""

    def before(*arguments: Any) -> None:
        arguments[0].info["began"] = time.perf_counter()

    def after(*arguments: Any) -> None:
        elapsed = (time.perf_counter() - arguments[0].info.pop("began")) * 1000
        part = _part(arguments[2])
        into[part] = into.get(part, 0.0) + elapsed

    event.listen(env.engine, "before_cursor_execute", before)
    event.listen(env.engine, "after_cursor_execute", after)
    try:
        yield
    finally:
        event.remove(env.engine, "before_cursor_execute", before)
        event.remove(env.engine, "after_cursor_execute", after)


def scope_sessions(env: BenchEnv, scope: Scope) -> set[uuid.UUID]:
    with env.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT id FROM sessions WHERE org_id = :o AND agent_id = :a AND user_id = :u"),
            {"o": scope.org_id, "a": scope.agent_id, "u": scope.user_id},
        )
        return {row[0] for row in rows}


def time_searches(
    env: BenchEnv, scope: Scope, asked: Sequence[Query], stub: StubVectors
) -> Timings:
    """Hybrid and lexical in turn on each query (this host drifts: turns cancel it)."""
    inside = scope_sessions(env, scope)
    timings = Timings()
    for number, query in enumerate(asked):
        runs: list[tuple[str, StubVectors | None]] = [("hybrid", stub), ("lexical", None)]
        for mode, vectors in runs if number % 2 else runs[::-1]:
            parts: dict[str, float] = {}
            began = time.perf_counter()
            with parts_of(env, parts), env.uow() as uow:
                found = search(uow=uow, query=SearchQuery(scope=scope, q=query.q), vectors=vectors)
            elapsed = (time.perf_counter() - began) * 1000
            if mode == "hybrid":
                for part, ms in parts.items():
                    timings.parts.setdefault(part, []).append(ms)
                assert found.mode == "hybrid", found.mode
                timings.hybrid.append(elapsed)
                timings.hits_outside += sum(h.session_id not in inside for h in found.hits)
            else:
                timings.lexical.append(elapsed)
                timings.lexical_modes.add(found.mode)
    return timings


def _params(scope: Scope, q: str) -> dict[str, Any]:
    """The parameters search() gives meaning.nearest for messages alone."""
    return service._params(SearchQuery(scope=scope, q=q, kind="message"))


# Each way to find a scope's nearest messages: as meaning.nearest chooses; meaning's
# statement as a sort of the scope's vectors (read by the session index, as a bitmap);
# as an HNSW walk (the scope a filter on the scan) at several ef_search. (settings, walk)
STRATEGIES: dict[str, tuple[tuple[str, ...], bool] | None] = {
    "as built": None,
    "exact (session index, sort)": (("enable_seqscan = off", "enable_indexscan = off"), False),
    **{
        f"HNSW walk, ef_search {ef}": (
            ("enable_seqscan = off", "enable_bitmapscan = off", f"hnsw.ef_search = {ef}"),
            True,
        )
        for ef in (40, 100, 200, 400)
    },
}


@dataclass
class Side:
    latencies: list[float] = field(default_factory=list)
    fewest: int = 10**9
    recalls: list[float] = field(default_factory=list)


def nearest_scores(
    env: BenchEnv, strategy: tuple[tuple[str, ...], bool] | None, scope: Scope, q: str,
    vector: list[float],
) -> tuple[float, list[float]]:  # fmt: skip
    """The time of the nearest messages by `strategy`, and their cosines."""
    params = _params(scope, q)
    with env.uow() as uow:
        connection = uow.connection()
        began = time.perf_counter()
        if strategy is None:
            rows = meaning.nearest(
                connection=uow.connection(), params=params, vector=vector, model=MODEL
            )
        else:
            settings, walk = strategy
            for setting in (*settings, "hnsw.iterative_scan = relaxed_order"):
                connection.execute(text(f"SET LOCAL {setting}"))
            values = {"vector": vector_literal(vector), "model": MODEL,
                      "pool": meaning.NEAREST}  # fmt: skip
            statement = text(meaning._statement(DIMENSIONS, walk=walk))
            rows = connection.execute(statement, {**params, **values}).all()
        elapsed = (time.perf_counter() - began) * 1000
    return elapsed, [float(row._mapping["score"]) for row in rows]


def vector_side(
    env: BenchEnv, scope: Scope, asked: Sequence[Query], stub: StubVectors
) -> dict[str, Side]:
    """Each strategy on the same queries, in turn. Recall against the exact scan's, ties
    counted: a row is right if it is as near as the exact scan's last (hashed bags of
    words tie often, and either of two tied rows is right)."""
    sides = {name: Side() for name in STRATEGIES}
    exact = STRATEGIES["exact (session index, sort)"]
    for query in asked:
        vector = stub.vectors[query.q]
        _, truth = nearest_scores(env, exact, scope, query.q, vector)
        for name, strategy in STRATEGIES.items():
            elapsed, scores = nearest_scores(env, strategy, scope, query.q, vector)
            side = sides[name]
            side.latencies.append(elapsed)
            side.fewest = min(side.fewest, len(scores))
            right = sum(score >= min(truth) - 1e-6 for score in scores) if truth else 0
            side.recalls.append(min(right, len(truth)) / max(1, len(truth)))
    return sides


def explain(env: BenchEnv, scope: Scope, query: Query, vector: list[float]) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of meaning's statement as the search sends it (its
    settings too): the statement is prefixed on its way to the server."""

    def prefixed(*arguments: Any) -> tuple[str, Any]:
        statement, parameters = arguments[2], arguments[3]
        if "near_messages AS" in statement:
            statement = "EXPLAIN (ANALYZE, BUFFERS) " + statement
        return statement, parameters

    event.listen(env.engine, "before_cursor_execute", prefixed, retval=True)
    try:
        with env.uow() as uow:
            params = {**_params(scope, query.q), "topics": True}
            rows = meaning.nearest(
                connection=uow.connection(), params=params, vector=vector, model=MODEL
            )
    finally:
        event.remove(env.engine, "before_cursor_execute", prefixed)
    plan = "\n".join(str(row[0]) for row in rows)
    return f"EXPLAIN (ANALYZE, BUFFERS), scope {scope.user_id}, q={query.q!r}:\n{plan}\n"


# --- the run -----------------------------------------------------------------------------


def timed_phase(name: str, work: Callable[[], None]) -> float:
    began = time.perf_counter()
    work()
    elapsed = time.perf_counter() - began
    print(f"  {name}: {elapsed:.0f} s", file=sys.stderr, flush=True)
    return elapsed


def row(name: str, samples: list[float], extra: str = "") -> str:
    return (
        f"  {name:<44} {percentile(samples, 0.5):8.2f} {percentile(samples, 0.95):8.2f}"
        f" {percentile(samples, 0.99):8.2f} {statistics.fmean(samples):8.2f}{extra}"
    )


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--messages", type=int, default=100_000, help="in the searched scope")
    parser.add_argument("--other-messages", type=int, default=100_000, help="in each of 2 others")
    parser.add_argument(
        "--small", default="50,2000,20000", help="sizes of small scopes beside them"
    )
    parser.add_argument("--searches", type=int, default=300, help="timed, per scope")
    parser.add_argument("--strategy-searches", type=int, default=40, help="per scope")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--clients", type=int, default=4, help="ingest clients")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN the statement to stderr")
    parser.add_argument(
        "--shared-buffers", default=SHARED_BUFFERS,
        help="the server's shared_buffers (default: enough to hold the HNSW index)",
    )  # fmt: skip
    parser.add_argument(
        "--keep", type=Path, default=None,
        help="keep the server's data in this directory; a later run with it reuses the scopes",
    )  # fmt: skip
    args = parser.parse_args()
    host = machine()
    small = [int(size) for size in args.small.split(",") if size]
    settings = {"shared_buffers": args.shared_buffers}
    with pgvector_server(directory=args.keep, settings=settings) as admin_url:
        env = kept_env(admin_url) if args.keep else None
        if env is None:
            env = bench_env(admin_url)
            run(env, args, host, small, build=True)
        else:
            print("  reusing the scopes kept in --keep", file=sys.stderr, flush=True)
            run(env, args, host, small, build=False)
        env.engine.dispose()


def kept_env(admin_url: str) -> BenchEnv | None:
    """The bench database a run with the same --keep left, if it got as far as its
    vectors; None to build anew."""
    try:
        env = reused_bench_env(admin_url)
    except sqlalchemy.exc.OperationalError:  # no such database yet
        return None
    with env.engine.connect() as connection:
        vectors = connection.execute(text("SELECT count(*) FROM message_vectors")).scalar()
    if vectors:
        return env
    env.engine.dispose()
    return None


def run(env: BenchEnv, args: Any, host: str, small: list[int], *, build: bool) -> None:
    vocabulary = Vocabulary(seed=2025)
    org = env.org_id()
    big = Scope(org_id=org, agent_id=AGENT, user_id="main")
    smalls = [Scope(org_id=org, agent_id=AGENT, user_id=f"small-{size}") for size in small]
    asked = queries(vocabulary, args.searches + args.warmup)
    stub = StubVectors({})
    began = time.perf_counter()
    for query in asked:
        stub.vectors[query.q] = embedding(query.q)
    embed_ms = (time.perf_counter() - began) * 1000 / len(asked)

    def build_scopes() -> None:
        with web_server(env, "procfile") as (port, _):
            build_scope(port, env.org_key, vocabulary, "main", args.messages, args.clients)
            for number in range(2):
                build_scope(port, env.org_key, vocabulary, f"other-{number}",
                            args.other_messages, args.clients)  # fmt: skip
            for size, scope in zip(small, smalls, strict=True):
                build_scope(port, env.org_key, vocabulary, scope.user_id, size, args.clients)
        settle(env)

    built_s = vectors_s = 0.0
    if build:
        built_s = timed_phase("scopes built through the API", build_scopes)
        vectors_s = timed_phase("vectors stored, HNSW built, analyzed", lambda: store_vectors(env))
    warmup, timed = asked[: args.warmup], asked[args.warmup :]
    time_searches(env, big, warmup, stub)
    results = {scope.user_id: time_searches(env, scope, timed, stub) for scope in [big, *smalls]}
    some = timed[: args.strategy_searches]
    sides = {scope.user_id: vector_side(env, scope, some, stub) for scope in [big, *smalls]}
    if args.explain:
        mixed = next(q for q in timed if q.kind == "mixed")
        for scope in [big, *smalls]:
            print(explain(env, scope, mixed, stub.vectors[mixed.q]), file=sys.stderr)
    report(env, args, host=host, built_s=built_s, vectors_s=vectors_s, embed_ms=embed_ms,
           results=results, sides=sides, timed=timed)  # fmt: skip


def report(
    env: BenchEnv, args: Any, *, host: str, built_s: float, vectors_s: float, embed_ms: float,
    results: dict[str, Timings], sides: dict[str, dict[str, Side]], timed: list[Query],
) -> None:  # fmt: skip
    with env.engine.connect() as connection:
        counts = connection.execute(
            text("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM message_vectors),"
                 " (SELECT count(*) FROM topic_vectors), current_setting('shared_buffers'),"
                 " (SELECT extversion FROM pg_extension WHERE extname = 'vector'), version()")
        ).one()  # fmt: skip
    print(
        f"bench/hybrid_speed: a scope of {args.messages:,} messages beside 2 of"
        f" {args.other_messages:,} and small ones of {args.small} ({counts[0]:,} messages,"
        f" {counts[1]:,} message and {counts[2]:,} topic vectors of {DIMENSIONS} dimensions;"
        + (
            f" built in {built_s:.0f} s, vectors and index in {vectors_s:.0f} s);"
            if built_s
            else " kept from an earlier run);"
        )
        + f" {counts[5].split(',')[0]}, pgvector {counts[4]}, shared_buffers {counts[3]};"
        f" machine: {host}"
    )
    print(f"  query vector by the stand-in (apart, not in the times below): {embed_ms:.3f} ms")
    print(f"  {'search in process, default call, ms':<44} {'p50':>8} {'p95':>8} {'p99':>8}"
          f" {'mean':>8}")  # fmt: skip
    for scope, timings in results.items():
        outside = f"   hits outside the scope: {timings.hits_outside}"
        print(row(f"{scope}: hybrid", timings.hybrid, outside))
        for kind in ("common", "mixed", "rare"):
            picked = [ms for ms, q in zip(timings.hybrid, timed, strict=True) if q.kind == kind]
            print(row(f"  of which {kind} words", picked))
        print(row(f"{scope}: lexical", timings.lexical))
        for part, samples in sorted(timings.parts.items()):
            print(row(f"  hybrid's {part}", samples))
    print(f"  {'vector side alone (messages), ms':<44} {'p50':>8} {'p95':>8} {'p99':>8}"
          f" {'mean':>8} {'fewest':>7} {'recall':>7}")  # fmt: skip
    for scope, by_strategy in sides.items():
        for name, side in by_strategy.items():
            extra = f" {side.fewest:7d} {statistics.fmean(side.recalls):7.3f}"
            print(row(f"{scope}: {name}", side.latencies, extra))
    main_scope = results["main"]
    as_built = {scope: s["as built"].fewest for scope, s in sides.items()}
    sizes = {
        "main": args.messages,
        **{f"small-{size}": int(size) for size in args.small.split(",")},
    }
    full = all(as_built[scope] >= min(meaning.NEAREST, size) for scope, size in sizes.items())
    scope_ok = all(t.hits_outside == 0 for t in results.values())
    print(f"  the fewest rows of the vector side as built, by scope: {as_built}")
    print(
        f"hybrid_p50_ms={percentile(main_scope.hybrid, 0.5):.2f}"
        f" hybrid_p95_ms={percentile(main_scope.hybrid, 0.95):.2f}"
        f" lexical_p95_ms={percentile(main_scope.lexical, 0.95):.2f}"
        f" scope_ok={scope_ok} full_pool={full}"
    )
    assert scope_ok, "a hybrid hit from outside its scope"


if __name__ == "__main__":
    main()
