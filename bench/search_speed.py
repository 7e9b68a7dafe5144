"""bench/search_speed ([2.5]): how fast search is in a scope of 100,000 messages, and what
the search vectors cost the message post.

1. **Ingest cost.** Posts are timed as bench/batch_import.py times them: its
   `post_batch` over `--clients` keep-alive clients in batches of `--batch`, then one
   message a post (`--singles`). Each runs under three schemas of the messages table:
   the migration's (a stored vector and its GIN index), the vector without its index,
   and neither (`ALTER TABLE messages DROP COLUMN search_vector`, the schema before
   [2.5]). After that the vector and index are added back as the model defines them. The
   topics' vector stays, since the ORM maps it. The schemas take turns `--rounds` times,
   because this host's speed drifts within minutes. The ratio is the median rate with
   the migration's schema over the median rate with neither.
2. **The scopes.** One scope gets `--messages` messages and two others get
   `--other-messages` each, so the scope filter matters. All of them go in through the
   API in batches: sessions of 200 messages, a topic closed every 40. The text is made
   up: sentences of English stop-words and 30,000 made-up words, drawn with Zipf-like
   frequencies, 3 to 120 words per message (median 16). That is about 9 content words a
   message, and a word's share of messages by frequency rank is close to LoCoMo's. No
   worker runs, so the closed topics get a title and summary by SQL, from their first
   four messages. Then the tables are vacuumed and analyzed.
3. **Search.** `--searches` question-like queries go through `GET /agents-api/search` from
   one keep-alive client, after `--warmup` untimed ones. They come in three classes of
   content words: common (the 200 most frequent), mixed (one common, one mid, one
   rare), and rare. The default call is timed (topics and messages, limit 10), and so is
   `kind=message`. Server-side timing is the service function in this process, on the
   same queries. `--explain` prints EXPLAIN (ANALYZE, BUFFERS) of one mixed query's message
   statement to stderr.

    .venv/bin/python -m bench.search_speed [--messages 100000] [--searches 1000] [--explain]
        [--rounds 3] [--ingest-messages 20000] [--singles 2000]

The last line is machine-readable: `p50_ms=… p95_ms=… ingest_ratio=…`. The latencies
are the default call through HTTP; the ratio is for batch posts.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import Table, event, text

from bench.batch_import import post_batch
from bench.common import (
    BenchEnv,
    Subprocess,
    arguments,
    bench_env,
    machine,
    percentile,
    reused_bench_env,
)
from bench.http_throughput import make_sessions, post_message, run_phase, web_server
from driftless_client import Client
from shared.llm.text import STOPWORDS
from shared.memory.scope import Scope
from shared.search.service import SearchQuery, search
from shared.sessions.models import Message

AGENT = "speed"
PER_SESSION = 200
PER_TOPIC = 40
CONTENT_WORDS = 30_000
QUERY_CLASSES = ("common", "mixed", "rare")
TEMPLATES = (
    "What did I say about {}?",
    "When did we talk about {} and {}?",
    "Do you remember the {} with {} and {}?",
    "{} {}",
    "Which {} did we pick for the {} {}?",
)


# --- made-up text with natural-language word frequencies ------------------------------


class Vocabulary:
    """Stop-words (about 45 % of tokens, as in English chat) and made-up content words,
    each drawn with Zipf-like frequency (rank r weighs 1/r)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
        words: dict[str, None] = {}
        while len(words) < CONTENT_WORDS:
            parts = self.rng.choices(syllables, k=self.rng.choice((2, 2, 3, 3, 4)))
            words["".join(parts) + self.rng.choice(("", "", "n", "r", "s", "t"))] = None
        self.content = list(words)
        self.stops = sorted(STOPWORDS)
        self.content_cum = _zipf_cumulative(len(self.content))
        self.stop_cum = _zipf_cumulative(len(self.stops))

    def message(self) -> str:
        length = min(120, max(3, round(self.rng.lognormvariate(2.8, 0.55))))
        words = [self._word() for _ in range(length)]
        words[0] = words[0].capitalize()
        return " ".join(words) + self.rng.choice((".", ".", ".", "?", "!"))

    def _word(self) -> str:
        if self.rng.random() < 0.45:
            return self.rng.choices(self.stops, cum_weights=self.stop_cum)[0]
        return self.rng.choices(self.content, cum_weights=self.content_cum)[0]

    def question(self, kind: str) -> str:
        template = self.rng.choice(TEMPLATES)
        slots = template.count("{}")
        common = lambda: self.rng.choice(self.content[:200])  # noqa: E731
        mid = lambda: self.rng.choice(self.content[200:5000])  # noqa: E731
        rare = lambda: self.rng.choice(self.content[5000:])  # noqa: E731
        pick = {"common": [common] * 3, "mixed": [common, mid, rare], "rare": [rare] * 3}[kind]
        return template.format(*(pick[i % 3]() for i in range(slots)))


def _zipf_cumulative(size: int) -> list[float]:
    total, cumulative = 0.0, []
    for rank in range(1, size + 1):
        total += 1 / rank
        cumulative.append(total)
    return cumulative


# --- ingest cost: batch posts with and without the search schema ----------------------


# The messages' search schema, from all to nothing: what the migration adds (a stored
# vector and its GIN index), the vector alone, neither (the schema before [2.5]).
SCHEMAS = ("vector and index", "vector, no index", "neither")


def set_schema(env: BenchEnv, schema: str) -> None:
    """Take the messages' search schema down to `schema`, or back up to all of it, as the
    model defines it (shared/sessions/models.py)."""
    table = Message.__table__
    assert isinstance(table, Table)
    column = table.c.search_vector
    assert column.computed is not None
    index = next(i for i in table.indexes if i.name == "ix_messages_search_vector")
    with env.engine.begin() as connection:
        has_column = connection.execute(
            text(
                "SELECT count(*) FROM information_schema.columns"
                " WHERE table_name = 'messages' AND column_name = 'search_vector'"
            )
        ).scalar_one()
        if schema == "neither":
            connection.execute(text("ALTER TABLE messages DROP COLUMN IF EXISTS search_vector"))
        elif schema == "vector, no index":
            connection.execute(text(f"DROP INDEX IF EXISTS {index.name}"))
        else:
            if not has_column:
                connection.execute(
                    text(
                        "ALTER TABLE messages ADD COLUMN search_vector tsvector"
                        f" GENERATED ALWAYS AS ({column.computed.sqltext}) STORED NOT NULL"
                    )
                )
            index.create(connection, checkfirst=True)


@dataclass
class Ingest:
    """Messages/s per schema, one sample per round."""

    batch: dict[str, list[float]]
    single: dict[str, list[float]]

    def median(self, way: str, schema: str) -> float:
        return statistics.median(getattr(self, way)[schema])

    def ratio(self, way: str) -> float:
        """The migration's schema over the one before it."""
        return self.median(way, SCHEMAS[0]) / self.median(way, SCHEMAS[-1])


def ingest_rates(env: BenchEnv, server: Subprocess, port: int, args: Any) -> Ingest:
    """Messages/s of batch posts and of one-message posts, for each schema in turn."""
    rates = Ingest({s: [] for s in SCHEMAS}, {s: [] for s in SCHEMAS})
    batches = max(1, args.ingest_messages // args.clients // args.batch)
    for _ in range(args.rounds):
        for schema in SCHEMAS:
            sessions = make_sessions(env, 2 * args.clients)
            set_schema(env, schema)
            requests = [post_batch(env.org_key, s, args.batch) for s in sessions[: args.clients]]
            name = f"{schema}: batches of {args.batch}"
            phase = run_phase(name, server, port, requests, per_client=batches, warmup=1)
            rates.batch[schema].append(phase.rps * args.batch)
            requests = [post_message(env.org_key, s) for s in sessions[args.clients :]]
            name = f"{schema}: one message a post"
            per_client = max(1, args.singles // args.clients)
            phase = run_phase(name, server, port, requests, per_client=per_client, warmup=5)
            rates.single[schema].append(phase.rps)
            print(
                f"  {schema}: {rates.batch[schema][-1]:,.0f} messages/s in batches,"
                f" {rates.single[schema][-1]:,.0f} one a post", file=sys.stderr, flush=True,
            )  # fmt: skip
    set_schema(env, SCHEMAS[0])
    return rates


# --- the scopes --------------------------------------------------------------------------


def build_scope(
    port: int, key: str, vocabulary: Vocabulary, user: str, count: int, clients: int
) -> None:
    """`count` messages in sessions of PER_SESSION, a topic closed every PER_TOPIC."""
    sessions = [
        [vocabulary.message() for _ in range(min(PER_SESSION, count - start))]
        for start in range(0, count, PER_SESSION)
    ]

    def post_session(messages: list[str]) -> None:
        with Client(f"http://127.0.0.1:{port}", key, timeout=120) as client:
            session_id = client.create_session(AGENT, user)["id"]
            for start in range(0, len(messages), PER_TOPIC):
                if start:
                    client.create_topic(session_id)
                batch = [
                    {"role": "user" if (start + i) % 2 == 0 else "assistant", "content": text_}
                    for i, text_ in enumerate(messages[start : start + PER_TOPIC])
                ]
                client.post_messages(session_id, batch)

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(post_session, sessions))


# No worker summarizes: a closed topic's title and summary come from its first messages.
SUMMARIES = """
    WITH firsts AS (
        SELECT topic_id, left(string_agg(content, ' ' ORDER BY id), 300) AS summary
          FROM (SELECT topic_id, id, content,
                       row_number() OVER (PARTITION BY topic_id ORDER BY id) AS n
                  FROM messages) AS m
         WHERE n <= 4
         GROUP BY topic_id
    )
    UPDATE topics t
       SET summary = f.summary, summary_source = 'llm', summarized_through_id = last_message_id,
           title = array_to_string((string_to_array(f.summary, ' '))[1:4], ' ')
      FROM firsts f
     WHERE f.topic_id = t.id AND t.status = 'closed'
"""


def settle(env: BenchEnv) -> None:
    with env.engine.begin() as connection:
        connection.execute(text(SUMMARIES))
    with env.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE messages, topics, sessions"))


# --- search ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    kind: str  # common | mixed | rare
    q: str


def queries(vocabulary: Vocabulary, count: int) -> list[Query]:
    return [
        Query(kind, vocabulary.question(kind))
        for kind in QUERY_CLASSES
        for _ in range(count // 3 + 1)
    ][:count]


def http_latencies(
    port: int, key: str, user: str, asked: list[Query], **params: str
) -> list[float]:
    latencies = []
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as http:
        for query in asked:
            began = time.perf_counter()
            answer = http.get(
                "/agents-api/search",
                params={"agentId": AGENT, "userId": user, "q": query.q, "limit": "10", **params},
            )
            latencies.append((time.perf_counter() - began) * 1000)
            answer.raise_for_status()
    return latencies


def service_latencies(env: BenchEnv, scope: Scope, asked: list[Query]) -> list[float]:
    """The service function in this process: PostgreSQL and the domain, no HTTP."""
    latencies = []
    for query in asked:
        began = time.perf_counter()
        with env.uow() as uow:
            search(uow=uow, query=SearchQuery(scope=scope, q=query.q, limit=10, kind="message"))
        latencies.append((time.perf_counter() - began) * 1000)
    return latencies


@contextlib.contextmanager
def statements_of(env: BenchEnv) -> Iterator[list[tuple[str, Any]]]:
    """The statements (and their parameters) the engine sends meanwhile."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(env.engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(env.engine, "before_cursor_execute", record)


def explain(env: BenchEnv, scope: Scope, query: Query) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the message statement the service sends for `query`."""
    with statements_of(env) as sent, env.uow() as uow:
        search(uow=uow, query=SearchQuery(scope=scope, q=query.q, limit=10, kind="message"))
    statement, parameters = next((s, p) for s, p in sent if "FROM messages m" in s)
    connection = env.engine.raw_connection()
    try:
        cursor = connection.cursor()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        connection.rollback()
    finally:
        connection.close()
    return f"EXPLAIN (ANALYZE, BUFFERS), q={query.q!r}:\n{plan}"


def summary(name: str, samples: list[float]) -> str:
    return (
        f"  {name:<46} {percentile(samples, 0.5):8.2f} {percentile(samples, 0.95):8.2f}"
        f" {percentile(samples, 0.99):8.2f} {statistics.fmean(samples):8.2f} {len(samples):6d}"
    )


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--messages", type=int, default=100_000, help="in the searched scope")
    parser.add_argument("--other-messages", type=int, default=20_000, help="in each of 2 others")
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4, help="ingest clients")
    parser.add_argument("--batch", type=int, default=500, help="messages per timed batch post")
    parser.add_argument("--ingest-messages", type=int, default=20_000, help="per timed phase")
    parser.add_argument("--singles", type=int, default=2000, help="one-message posts per phase")
    parser.add_argument("--rounds", type=int, default=3, help="of the three schemas in turn")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN one query to stderr")
    parser.add_argument(
        "--reuse", action="store_true",
        help="search again over the scopes the previous run built; no ingest timing",
    )  # fmt: skip
    args = parser.parse_args()
    host = machine()
    env = (reused_bench_env if args.reuse else bench_env)(args.admin_database_url)
    vocabulary = Vocabulary(seed=2025)
    scope = Scope(org_id=env.org_id(), agent_id=AGENT, user_id="main")
    asked = queries(vocabulary, args.searches + args.warmup)
    warmup, timed = asked[: args.warmup], asked[args.warmup :]
    with web_server(env, "procfile") as (port, server):
        ingest, built_s = None, 0.0
        if not args.reuse:
            ingest = ingest_rates(env, server, port, args)
            began = time.perf_counter()
            build_scope(port, env.org_key, vocabulary, "main", args.messages, args.clients)
            for number in range(2):
                build_scope(
                    port, env.org_key, vocabulary, f"other-{number}", args.other_messages,
                    args.clients,
                )  # fmt: skip
            settle(env)
            built_s = time.perf_counter() - began
        http_latencies(port, env.org_key, "main", warmup)
        both = http_latencies(port, env.org_key, "main", timed)
        messages_only = http_latencies(port, env.org_key, "main", timed, kind="message")
    service = service_latencies(env, scope, timed)
    if args.explain:
        print(explain(env, scope, next(q for q in timed if q.kind == "mixed")), file=sys.stderr)
    report(env, args, host=host, built_s=built_s, ingest=ingest, timed=timed,
           both=both, messages_only=messages_only, service=service)  # fmt: skip


def report(
    env: BenchEnv, args: Any, *, host: str, built_s: float, ingest: Ingest | None,
    timed: list[Query], both: list[float], messages_only: list[float], service: list[float],
) -> None:  # fmt: skip
    with env.engine.connect() as connection:
        total = connection.execute(text("SELECT count(*) FROM messages")).scalar_one()
    built = f"built in {built_s:.0f} s" if ingest else "reused from the previous run"
    print(
        f"bench/search_speed: a scope of {args.messages:,} messages beside 2 of"
        f" {args.other_messages:,} ({total:,} messages in the database, {built});"
        f" {len(timed)} searches, one keep-alive client; machine: {host}"
    )
    print(f"  {'search, ms':<46} {'p50':>8} {'p95':>8} {'p99':>8} {'mean':>8} {'n':>6}")
    print(summary("HTTP, topics and messages (the default)", both))
    for kind in QUERY_CLASSES:
        picked = [ms for ms, q in zip(both, timed, strict=True) if q.kind == kind]
        print(summary(f"  of which {kind} words", picked))
    print(summary("HTTP, kind=message", messages_only))
    print(summary("service function, kind=message (no HTTP)", service))
    if ingest is not None:
        print_ingest(ingest, args)
    ratio = f"{ingest.ratio('batch'):.3f}" if ingest else "not-measured"
    print(
        f"p50_ms={percentile(both, 0.5):.2f} p95_ms={percentile(both, 0.95):.2f}"
        f" ingest_ratio={ratio}"
    )


def print_ingest(ingest: Ingest, args: Any) -> None:
    print(f"  {'ingest, messages/s (median of ' + str(args.rounds) + ')':<46}", end="")
    print(f" {'batches of ' + str(args.batch):>18} {'one a post':>12}")
    for schema in SCHEMAS:
        print(
            f"  {schema:<46} {ingest.median('batch', schema):>18,.0f}"
            f" {ingest.median('single', schema):>12,.0f}"
        )
    print(
        f"  {'ratio with ÷ without (neither)':<46} {ingest.ratio('batch'):>18.3f}"
        f" {ingest.ratio('single'):>12.3f}"
    )


if __name__ == "__main__":
    main()
