"""bench/recall_quality ([2.5]): does search find the turns that answer a question?

It ingests LoCoMo-format conversations (the format: the data's README.md) through the
running system and asks each category 1–4 question through `GET /agents-api/search`
(`kind=message`, `limit=10`, the question as `q`).

- The system is real: the Procfile's web (gunicorn) and its worker (Celery, all queues),
  both with `DRIFTLESS_LLM=local`, so titles and summaries are made offline, on the
  bench's own PostgreSQL and Redis (bench/common.py).
- Each conversation is one agent + user scope of one org. Each LoCoMo session is one
  session: speaker_a posts as `user` and speaker_b as `assistant`. An image turn's
  caption follows its text as ` [image: <caption>]`.
- Turns go in as an agent posts them, `--batch` (2) to a request. After a post that
  enqueued a heartbeat (R26), ingest waits for the worker's evaluation (drift and fork,
  R30), as a conversation's next turn comes after it. At the end of each LoCoMo session
  the topic is closed (`POST …/topics`), and its summary is made as the pipeline would
  (R25). Questions are asked only once every summary is made.
- `--speaker-names` stores each turn as `<speaker>: <text>`; `--names-field` ([4.3])
  posts the speaker as the message's `name` instead, its text as it is (the server
  searches and embeds the name with the text). A LoCoMo question names people. This is
  an ingestion choice; compare runs only when it is the same on both sides.

Metric: a question's recall@k is the share of its evidence turns (`evidence` dia_ids)
among the messages of the top k results. The score is the mean over questions, as in the
reference (BM25 over single turns, recall@5 = 0.469, recall@10 = 0.539 on the dev
split). Category 5 (adversarial) and questions without evidence are left out. One dev
evidence entry, "D8:6; D9:17", is read as two ids. Categories are labelled as LoCoMo's
release numbers them: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop.

`--reference` also scores BM25 over single turns in Python (lower-cased words,
stop-words out, no stemming: the reference's method) on the same turns, so a reader can
check the metric against the reference's numbers. `--reuse` asks again over what the
previous run ingested (same files and flags) and skips the ingest. The scoring variants
that chose the shipped ranking (shared/search/ranking.py) are in this file's history
(commit f42e881) and their results in docs/benchmarks.md.

`--embeddings-url URL` ([3.3]) measures hybrid search: the bench database is on an
embedded PostgreSQL with pgvector (shared/infra/embedded.py, in a temporary directory,
stopped at the end; migrated, so the vector tables are there), unless
`--admin-database-url` names a server that has it. Web, worker and the Procfile's beat
(its schedule file in a temporary directory) run with `DRIFTLESS_EMBEDDINGS=openai` on
URL and `--embeddings-model`, so beat's sweep embeds the turns and summaries as they come
(shared/embeddings/sweep.py). Questions are asked once every user and assistant message
and every summarized topic has a vector; the report tallies the answers' `mode` (each
should be hybrid) and says why any was lexical. Serve all-MiniLM-L6-v2 with
bench/embeddings_server.py (`OMP_NUM_THREADS=1` on a busy machine: the query's vector has
a 0.3 s deadline, shared/embeddings/query.py).

    .venv/bin/python -m bench.recall_quality FILE... [--limit-conversations N]
        [--speaker-names | --names-field] [--batch 2] [--reference] [--reuse]
        [--embeddings-url URL [--embeddings-model all-MiniLM-L6-v2]]

The last line is machine-readable: `recall@5=… recall@10=… questions=N` (the API's).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shlex
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from bench.common import (
    BIN,
    BenchEnv,
    Subprocess,
    arguments,
    bench_env,
    describe,
    machine,
    reused_bench_env,
    subprocess_running,
    wait_until,
)
from bench.embeddings_server import DEFAULT_MODEL
from bench.http_throughput import PROCFILE, web_server
from bench.worker_pool import worker_answers
from driftless_client import Client
from shared.embeddings.backfill import missing
from shared.embeddings.store import vectors_available
from shared.infra.config import Settings
from shared.llm.text import STOPWORDS
from tests.vectors import pgvector_server
from worker.app import make_celery

K = (5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
AGENT = "locomo"


# --- the data ----------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    speaker_a: str
    speaker_b: str
    sessions: list[list[Turn]]
    questions: list[Question]

    def content(self, turn: Turn, *, names: bool) -> str:
        return f"{turn.speaker}: {turn.text}" if names else turn.text


def load(paths: Sequence[Path]) -> list[Conversation]:
    conversations = []
    for path in paths:
        for sample in json.loads(path.read_text()):
            # locomo10.json as published nests the sessions under "conversation".
            raw = {**sample.get("conversation", {}), **sample}
            keys = sorted(
                (int(m.group(1)), key)
                for key in raw
                if (m := re.fullmatch(r"session_(\d+)", key)) and raw[key]
            )
            sessions = [[_turn(t) for t in raw[key]] for _, key in keys]
            questions = [
                Question(q["question"], q["category"], frozenset(_evidence(q["evidence"])))
                for q in raw["qa"]
                if q["category"] in CATEGORIES and _evidence(q.get("evidence", []))
            ]
            conversations.append(
                Conversation(raw["speaker_a"], raw["speaker_b"], sessions, questions)
            )
    return conversations


def _turn(raw: dict[str, Any]) -> Turn:
    caption = raw.get("blip_caption")
    text_ = raw["text"] + (f" [image: {caption}]" if caption else "")
    return Turn(raw["dia_id"], raw["speaker"], text_)


def _evidence(items: Sequence[str]) -> list[str]:
    return [e for item in items for e in re.split(r"[;,\s]+", item) if e]


# --- ingest through the API ------------------------------------------------------------


@dataclass(frozen=True)
class Ingested:
    conversation: Conversation
    user_id: str
    dia_of: dict[int, str]  # message id -> dia_id


def procfile_command(kind: str) -> list[str]:
    """The Procfile's line of `kind` (worker, beat), its program from this venv."""
    found = re.search(rf"^{kind}:\s*(.+)$", PROCFILE.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"{PROCFILE} has no {kind}: line")
    words = shlex.split(found.group(1))
    return [str(BIN / words[0]), *words[1:]]


def worker_command(name: str) -> list[str]:
    """The Procfile's worker line, with a name of its own."""
    return [*procfile_command("worker"), "--hostname", name]


def beat_command(schedule: Path) -> list[str]:
    """The Procfile's beat line, its schedule file at `schedule` (/tmp's is other runs')."""
    words = procfile_command("beat")
    at = words.index("--schedule")
    return [*words[: at + 1], str(schedule), *words[at + 2 :]]


class Finished:
    """Counts the worker's finished heartbeat evaluations in its log (worker/tasks.py logs
    one line per job, whatever its outcome, after the job's commit): not every outcome
    writes an audit row."""

    LINE = re.compile(rb"evaluate_topic \S+ \(heartbeat\): ")

    def __init__(self, worker: Subprocess) -> None:
        self.worker, self.seen, self.offset = worker, 0, 0

    def at_least(self, expected: int) -> bool:
        with self.worker.log.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        self.seen += len(self.LINE.findall(complete))
        return self.seen >= expected

    def wait(self, expected: int) -> None:
        try:
            wait_until(
                lambda: self.at_least(expected), timeout_s=120, what="a heartbeat evaluation",
                process=self.worker,
            )  # fmt: skip
        except SystemExit as exc:  # say why: the worker's own words
            tail = self.worker.log.read_text(errors="replace")[-4000:]
            raise SystemExit(f"{exc}; the worker's log ends:\n{tail}") from None


def count(env: BenchEnv, sql: str) -> int:
    with env.engine.connect() as connection:
        return int(connection.execute(text(sql)).scalar_one())


def summaries_pending(env: BenchEnv) -> int:
    return count(
        env,
        "SELECT count(*) FROM topics WHERE status = 'closed'"
        " AND summarized_through_id IS DISTINCT FROM last_message_id",
    )


def ingest(
    env: BenchEnv, client: Client, conversations: Sequence[Conversation], *, batch: int,
    names: bool, names_field: bool, worker: Subprocess,
) -> list[Ingested]:  # fmt: skip
    """Post every turn, wait for each heartbeat's evaluation, close each session's topic."""
    ingested, heartbeats, finished = [], 0, Finished(worker)
    for index, conversation in enumerate(conversations):
        dia_of: dict[int, str] = {}
        for turns in conversation.sessions:
            session_id = client.create_session(AGENT, user_of(index, conversation))["id"]
            for start in range(0, len(turns), batch):
                chunk = turns[start : start + batch]
                messages = [
                    {
                        "role": "user" if t.speaker == conversation.speaker_a else "assistant",
                        "content": conversation.content(t, names=names),
                        **({"name": t.speaker} if names_field else {}),
                    }
                    for t in chunk
                ]
                answer = client.post_messages(session_id, messages)
                dia_of.update(
                    (stored["id"], t.dia_id)
                    for stored, t in zip(answer["messages"], chunk, strict=True)
                )
                if answer["driftEvaluationEnqueued"]:
                    heartbeats += 1
                    finished.wait(heartbeats)
            client.create_topic(session_id)  # closes the topic; the worker summarizes it
        ingested.append(Ingested(conversation, user_of(index, conversation), dia_of))
    wait_until(
        lambda: summaries_pending(env) == 0, timeout_s=300, what="the summaries", process=worker
    )
    return ingested


def wait_for_vectors(env: BenchEnv, model: str, worker: Subprocess) -> float:
    """Wait until every user and assistant message and every summarized topic has a
    vector of `model` (beat's sweep, every 2 s); the seconds it took."""
    began = time.perf_counter()

    def done() -> bool:
        with env.uow() as uow:
            return missing(uow=uow, model=model) == 0

    wait_until(done, timeout_s=900, what="the vectors", process=worker)
    return time.perf_counter() - began


def user_of(index: int, conversation: Conversation) -> str:
    return f"{index}:{conversation.speaker_a}"


def reuse(env: BenchEnv, conversations: Sequence[Conversation]) -> list[Ingested]:
    """What a previous run ingested, read back: a scope's messages in id order are its
    turns in posting order."""
    ingested = []
    with env.engine.connect() as connection:
        for index, conversation in enumerate(conversations):
            ids = connection.execute(
                text(
                    "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id"
                    " WHERE s.agent_id = :agent AND s.user_id = :user ORDER BY m.id"
                ),
                {"agent": AGENT, "user": user_of(index, conversation)},
            ).scalars()
            turns = [t.dia_id for session in conversation.sessions for t in session]
            try:
                dia_of = dict(zip(ids, turns, strict=True))
            except ValueError:
                raise SystemExit("--reuse: the database holds other data; run without it") from None
            ingested.append(Ingested(conversation, user_of(index, conversation), dia_of))
    return ingested


# --- scoring ---------------------------------------------------------------------------


@dataclass
class Score:
    """Per-question recall@k, by category."""

    recalls: dict[int, list[tuple[float, ...]]]

    @classmethod
    def empty(cls) -> Score:
        return cls(defaultdict(list))

    def add(self, question: Question, found: Sequence[str]) -> None:
        self.recalls[question.category].append(
            tuple(len(question.evidence & set(found[:k])) / len(question.evidence) for k in K)
        )

    def at(self, k: int, category: int | None = None) -> float:
        column = K.index(k)
        rows = [r for c, rs in self.recalls.items() if category in (None, c) for r in rs]
        return sum(r[column] for r in rows) / len(rows) if rows else math.nan

    @property
    def questions(self) -> int:
        return sum(len(rows) for rows in self.recalls.values())


def ask_api(
    http: httpx.Client, ingested: Sequence[Ingested], latencies_ms: list[float], modes: Counter[str]
) -> Score:
    score = Score.empty()
    for item in ingested:
        for question in item.conversation.questions:
            params = {"agentId": AGENT, "userId": item.user_id, "q": question.text}
            began = time.perf_counter()
            answer = http.get(
                "/agents-api/search", params={**params, "kind": "message", "limit": max(K)}
            )
            latencies_ms.append((time.perf_counter() - began) * 1000)
            answer.raise_for_status()
            modes[answer.json()["mode"]] += 1
            ids = [hit["messageId"] for hit in answer.json()["results"]]
            score.add(question, [item.dia_of[i] for i in ids])
    return score


# --- variants of the scoring, run directly on the bench database -----------------------


def bm25(items: list[Ingested], *, names: bool, k1: float = 1.2, b: float = 0.75) -> Score:
    """The reference's method: BM25 over single turns (lower-cased words, stop-words out,
    no stemming)."""
    score = Score.empty()
    for item in items:
        c = item.conversation
        turns = [t for session in c.sessions for t in session]
        docs = [Counter(_words(c.content(t, names=names))) for t in turns]
        df = Counter(w for d in docs for w in d)
        mean_len = sum(sum(d.values()) for d in docs) / len(docs)
        for question in c.questions:
            words = set(_words(question.text))
            scored = []
            for turn, d in zip(turns, docs, strict=True):
                length = sum(d.values())
                s = sum(
                    math.log(1 + (len(docs) - df[w] + 0.5) / (df[w] + 0.5))
                    * d[w] * (k1 + 1) / (d[w] + k1 * (1 - b + b * length / mean_len))
                    for w in words if w in d
                )  # fmt: skip
                scored.append((s, turn.dia_id))
            scored.sort(key=lambda pair: -pair[0])
            score.add(question, [dia for s, dia in scored[: max(K)] if s > 0])
    return score


def _words(text_: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text_.lower()) if w not in STOPWORDS]


# --- the run ---------------------------------------------------------------------------


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument("--batch", type=int, default=2, help="turns per message post")
    speakers = parser.add_mutually_exclusive_group()
    speakers.add_argument("--speaker-names", action="store_true", help="store '<speaker>: <text>'")
    speakers.add_argument(
        "--names-field", action="store_true", help="post the speaker as the message's `name`"
    )
    parser.add_argument(
        "--reference", action="store_true",
        help="also score BM25 over single turns (the reference's method) on the same data",
    )  # fmt: skip
    parser.add_argument(
        "--reuse", action="store_true",
        help="ask again over what the previous run (same files and flags) ingested",
    )  # fmt: skip
    parser.add_argument(
        "--embeddings-url", default=None,
        help="hybrid search: an OpenAI-compatible embeddings server (…/v1); the database on an"
        " embedded PostgreSQL with pgvector unless --admin-database-url names one",
    )  # fmt: skip
    parser.add_argument("--embeddings-model", default=DEFAULT_MODEL, help="with --embeddings-url")
    args = parser.parse_args()
    if args.embeddings_url and args.reuse:
        parser.error("--reuse cannot go with --embeddings-url: the embedded server is gone")
    conversations = load(args.files)[: args.limit_conversations]
    host = machine()
    with contextlib.ExitStack() as servers:
        admin_url = args.admin_database_url
        if args.embeddings_url and admin_url is None:
            admin_url = servers.enter_context(pgvector_server())
        env = (reused_bench_env if args.reuse else bench_env)(admin_url)
        servers.callback(env.engine.dispose)
        if args.embeddings_url:
            env.environment.update(embeddings_environment(env, args))
        run(env, conversations, args, host=host)


def embeddings_environment(env: BenchEnv, args: Any) -> dict[str, str]:
    """Web's and worker's settings for hybrid search; the vector tables must be there."""
    with env.uow() as uow:
        if not vectors_available(uow):
            raise SystemExit("--embeddings-url: the database server has no pgvector")
    return {
        "DRIFTLESS_EMBEDDINGS": "openai",
        "DRIFTLESS_EMBEDDINGS_BASE_URL": args.embeddings_url,
        "DRIFTLESS_EMBEDDINGS_MODEL": args.embeddings_model,
    }


def run(env: BenchEnv, conversations: list[Conversation], args: Any, *, host: str) -> None:
    app = make_celery(
        Settings(database_url=env.database_url, redis_url=env.redis_url, broker_url=env.broker_url)
    )
    name = f"bench-recall-{uuid.uuid4().hex[:6]}@localhost"
    began, vectors_s = time.perf_counter(), 0.0
    with contextlib.ExitStack() as running:
        port, web = running.enter_context(web_server(env, "procfile"))
        http = running.enter_context(
            httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=60,
                headers={"Authorization": f"Bearer {env.org_key}"},
            )
        )  # fmt: skip
        if args.reuse:
            items = reuse(env, conversations)
        else:
            command, environment = worker_command(name), env.process_environment(LOG_LEVEL="INFO")
            worker = running.enter_context(subprocess_running(command, environment))
            wait_until(lambda: worker_answers(app, name), timeout_s=60, what=name, process=worker)
            if args.embeddings_url:  # beat's sweep embeds as the turns come in
                schedule = Path(running.enter_context(tempfile.TemporaryDirectory())) / "beat"
                running.enter_context(subprocess_running(beat_command(schedule), environment))
            client = Client(f"http://127.0.0.1:{port}", env.org_key, http_client=http)
            items = ingest(
                env, client, conversations, batch=args.batch, names=args.speaker_names,
                names_field=args.names_field, worker=worker,
            )  # fmt: skip
        ingest_s = time.perf_counter() - began
        if args.embeddings_url:
            vectors_s = wait_for_vectors(env, args.embeddings_model, worker)
        latencies: list[float] = []
        modes: Counter[str] = Counter()
        api = ask_api(http, items, latencies, modes)
        web_log = web.log.read_text(errors="replace")  # its file goes when the web stops
    print_report(env, items, api, latencies, args, host=host, ingest_s=ingest_s)
    if args.embeddings_url:
        print_vectors(env, args.embeddings_model, modes, vectors_s=vectors_s, web_log=web_log)
    if args.reference:
        # The name field is searched as the name in the text is: the same reference.
        print_reference(items, names=args.speaker_names or args.names_field)
    print(f"recall@5={api.at(5):.3f} recall@10={api.at(10):.3f} questions={api.questions}")


def print_report(
    env: BenchEnv, items: list[Ingested], api: Score, latencies: list[float], args: Any, *,
    host: str, ingest_s: float,
) -> None:  # fmt: skip
    turns = sum(len(s) for i in items for s in i.conversation.sessions)
    topics = count(env, "SELECT count(*) FROM topics WHERE last_message_id IS NOT NULL")
    forks = count(env, "SELECT count(*) FROM evaluations WHERE outcome = 'fork'")
    files = ", ".join(p.name for p in args.files)
    print(
        f"bench/recall_quality: {len(items)} conversations ({turns} turns, {api.questions}"
        f" questions of categories 1-4) from {files}; machine: {host}"
    )
    done = "reused from the previous run" if args.reuse else f"{ingest_s:.0f} s with the summaries"
    print(
        f"  ingest: {turns} messages in {sum(len(i.conversation.sessions) for i in items)}"
        f" sessions, {topics} topics ({forks} forks by drift), {done};"
        f" speaker names: {_speakers(args)}"
    )
    print(f"  {'category':<26} {'questions':>9} {'recall@5':>9} {'recall@10':>10}")
    for category, label in [*CATEGORIES.items(), (None, "all")]:
        rows = api.questions if category is None else len(api.recalls[category])
        print(
            f"  {str(category or '') + ' ' + label:<26} {rows:>9} {api.at(5, category):>9.3f}"
            f" {api.at(10, category):>10.3f}"
        )
    print(f"  search latency, as the client saw it: {describe(latencies)}")


def _speakers(args: Any) -> str:
    if args.names_field:
        return "as the message's name field"
    return "in content" if args.speaker_names else "none"


def print_vectors(
    env: BenchEnv, model: str, modes: Counter[str], *, vectors_s: float, web_log: str
) -> None:
    """What the sweep embedded, and how each answer was found (hybrid, or lexical: why)."""
    messages = count(env, "SELECT count(*) FROM messages WHERE role <> 'tool'")
    vectors = count(env, "SELECT count(*) FROM message_vectors")
    topics = count(env, "SELECT count(*) FROM topics WHERE summary IS NOT NULL")
    topic_vectors = count(env, "SELECT count(*) FROM topic_vectors")
    print(
        f"  vectors by {model}: {vectors} of {messages} messages, {topic_vectors} of {topics}"
        f" summarized topics, all in {vectors_s:.0f} s after the summaries (beat's sweep)"
    )
    print(f"  answers by mode: {', '.join(f'{n} {mode}' for mode, n in modes.most_common())}")
    if modes["lexical"]:
        said = [line for line in web_log.splitlines() if "embedding" in line]
        print(
            f"  {modes['lexical']} lexical: the web had no query vector (the server past the"
            f" deadline of shared/embeddings/query.py, or failing); the web's log:"
            f" {' | '.join(said[-3:]) or 'nothing'}"
        )


def print_reference(items: list[Ingested], *, names: bool) -> None:
    """BM25 over single turns, in Python: the reference's method, to check the metric."""
    score = bm25(items, names=names)
    per = "  ".join(f"c{c} {score.at(10, c):.3f}" for c in CATEGORIES)
    print(
        f"  BM25 reference, single turns: recall@5 {score.at(5):.3f}"
        f" recall@10 {score.at(10):.3f} (recall@10 by category: {per})"
    )


if __name__ == "__main__":
    main()
