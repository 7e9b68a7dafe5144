"""bench/token_economy: what a 200-turn conversation costs in LLM calls and tokens.

A replay of 100 user + 100 assistant messages with several changes of subject through
the real pipeline: messages posted with the service function the web calls (one unit
of work each, jobs sent to the real Redis broker after the commit), a heartbeat
evaluation every 10th message of a topic (R26), an exit trigger every `--exit-every`
messages and one at the end (debounced, R27–R28), and a real Celery worker (in this
process, threads pool) running the jobs against the tests' OpenAI-compatible server
through the `openai` provider. After each message that enqueued a job, the replay
waits until the worker is idle, as an agent's next turn usually comes after the
evaluation is done.

The model is a perfect drift detector: it knows which subject every message belongs
to and answers a fork at the first message of a new subject in the window; a summary
request gets a title and a summary of about 400 characters. Token counts are the usage
the provider reports, which FakeOpenAI estimates as characters ÷ 4 of the prompt's
messages and of the answer: a real tokenizer counts differently; the call counts do not
depend on it.

The conversation is built in, or taken from the labelled data (consecutive dialogues
of a DialSeg711/TIAGE file, its topic labels as the subjects; see bench/drift_quality.py):

    .venv/bin/python -m bench.token_economy [--dialogues FILE [--start N]] [--messages 200]

The last line is machine-readable (`key=value` pairs).
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.signals import after_task_publish, task_postrun
from sqlalchemy import func, select

from bench.common import BenchEnv, arguments, bench_env, machine
from bench.drift_quality import load_dialogues
from shared.evaluations.models import Evaluation
from shared.evaluations.requests import request_evaluation
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import CeleryJobQueue
from shared.llm.base import LLM, Completion, DriftRequest, SummaryRequest
from shared.llm.factory import make_llm
from shared.llm.prompts import SUMMARY_INSTRUCTIONS, one_line
from shared.sessions.models import Message
from shared.sessions.service import create_session, post_message
from shared.topics.models import Topic
from shared.triggers.debounce import Debouncer
from tests.llm_server import FakeOpenAI
from worker.app import make_celery
from worker.context import context_of

# The built-in conversation: (subject, messages, facets). Lengths are even, so every
# subject opens with a user message; they add up to 200.
SUBJECTS: list[tuple[str, int, list[str]]] = [
    ("billing service stack", 24, ["the database", "background jobs", "retries",
     "invoice currency", "the deadline", "who owns migrations"]),
    ("hiking trip in the Dolomites", 18, ["the Alta Via 1 route", "booking huts",
     "what boots to bring", "the weather in July", "train to Cortina"]),
    ("quarterly hiring plan", 30, ["two backend roles", "the interview loop",
     "the take-home exercise", "salary bands", "the recruiter budget", "onboarding"]),
    ("flaky CI pipeline", 22, ["the timeout in the e2e job", "retrying tests",
     "caching the venv", "the Redis service container", "who gets paged"]),
    ("birthday party for my daughter", 16, ["the cake", "the guest list",
     "a magician or a bouncy castle", "the budget"]),
    ("database migration to PostgreSQL 16", 34, ["logical replication", "the cutover window",
     "extensions we rely on", "the rollback plan", "connection pooling", "testing on a copy"]),
    ("learning Italian", 20, ["an app or a tutor", "twenty minutes a day",
     "grammar first or vocabulary", "Italian podcasts"]),
    ("on-call rotation", 36, ["weekly or daily handover", "paging thresholds", "the runbook",
     "compensation for nights", "escalation to the lead", "the postmortem template"]),
]  # fmt: skip
USER_LINES = [
    "On the {subject}: what do you think about {facet}? I want something that lasts.",
    "Another point for the {subject}: {facet}. Any concerns before we commit to it?",
    "Let's decide {facet} for the {subject} today, I don't want to reopen it next week.",
]
ASSISTANT_LINES = [
    "For the {subject}, {facet}: I'd keep it simple and write the decision down so the"
    " team doesn't revisit it.",
    "Noted on {facet}. It fits the {subject} plan; the main risk is timing, so let's set a"
    " date and an owner.",
    "Agreed, {facet} is settled for the {subject}. I'll add it to the notes with the"
    " reasons we discussed.",
]
SUMMARY_CHARS = 400
WINDOW_ID = re.compile(r"^\[id=(\d+)\]", re.MULTILINE)


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    subject: int  # index of its subject (the reference segmentation)


def scripted(messages: int) -> list[Turn]:
    turns = []
    for index, (subject, count, facets) in enumerate(SUBJECTS):
        for i in range(count):
            facet = facets[(i // 2) % len(facets)]
            lines = USER_LINES if i % 2 == 0 else ASSISTANT_LINES
            content = lines[(i // 2) % len(lines)].format(subject=subject, facet=facet)
            turns.append(Turn("user" if i % 2 == 0 else "assistant", content, index))
    return turns[:messages]


def from_dialogues(path: Path, start: int, messages: int) -> list[Turn]:
    """Consecutive dialogues of a labelled file, from `start`, up to `messages` turns;
    every dialogue starts a new subject, as do its labelled segments."""
    turns: list[Turn] = []
    subject = 0
    for dialogue in load_dialogues(path)[start:]:
        utterances = iter(dialogue.utterances)
        for length in dialogue.segments:
            for _ in range(length):
                role = "user" if len(turns) % 2 == 0 else "assistant"
                turns.append(Turn(role, next(utterances), subject))
            subject += 1
        if len(turns) >= messages:
            break
    if not turns:
        raise SystemExit(f"{path}: no dialogue from {start} on")
    return turns[:messages]  # all there are, if fewer: the report says how many


@dataclass
class Calls:
    """What the worker asked the LLM, by kind, with the usage the provider reported."""

    prompt: dict[str, list[int]] = field(default_factory=lambda: {"drift": [], "summary": []})
    completion: dict[str, list[int]] = field(default_factory=lambda: {"drift": [], "summary": []})
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, completion: Completion) -> Completion:
        with self.lock:
            self.prompt[kind].append(completion.usage.prompt_tokens)
            self.completion[kind].append(completion.usage.completion_tokens)
        return completion


class RecordingLLM:
    """The worker's real provider, with every call's usage recorded by kind."""

    def __init__(self, inner: LLM, calls: Calls) -> None:
        self._inner, self._calls = inner, calls
        self.model = inner.model

    def summarize(self, request: SummaryRequest) -> Completion:
        return self._calls.record("summary", self._inner.summarize(request))

    def detect_drift(self, request: DriftRequest) -> Completion:
        return self._calls.record("drift", self._inner.detect_drift(request))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Oracle:
    """The model's answers: a perfect drift detector and a plain summarizer."""

    def __init__(self, env: BenchEnv, turns: list[Turn]) -> None:
        self._env, self._turns = env, turns
        self.subject_of: dict[int, int] = {}  # message id -> subject index

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or [{}]
        system, user = str(messages[0].get("content")), str(messages[-1].get("content"))
        if system == SUMMARY_INSTRUCTIONS:
            return self._summary(user)
        return json.dumps(self._drift([int(i) for i in WINDOW_ID.findall(user)]))

    def _summary(self, transcript: str) -> str:
        first = transcript.split("\n", 1)[0].split("] ", 1)[-1]
        summary = one_line(transcript.replace("[user] ", "").replace("[assistant] ", ""))
        return json.dumps(
            {
                "title": " ".join(first.split()[:6]),
                "summary": summary[:SUMMARY_CHARS],
                "include_in_memory": True,
            }
        )

    def _drift(self, window: list[int]) -> dict[str, Any]:
        no_drift = {"drift": False, "first_message_id": None, "new_title": None}
        if not window:
            return no_drift
        with self._env.uow() as uow:  # the topic's subject: that of its first message
            topic_id = select(Message.topic_id).where(Message.id == window[0])
            first = uow.session.scalar(
                select(func.min(Message.id)).where(Message.topic_id == topic_id.scalar_subquery())
            )
        home = self.subject_of.get(first or window[0])
        for message_id in window:
            subject = self.subject_of.get(message_id, home)
            if subject != home and subject is not None:
                return {"drift": True, "first_message_id": message_id,
                        "new_title": self._turns_title(subject)}  # fmt: skip
        return no_drift

    def _turns_title(self, subject: int) -> str:
        first = next(t for t in self._turns if t.subject == subject)
        return " ".join(first.content.split()[:6])


class Idle:
    """Counts jobs published and finished in this process (bench and in-process worker)."""

    def __init__(self) -> None:
        self.published = self.finished = 0
        self._lock = threading.Lock()
        after_task_publish.connect(self._on_publish, weak=False)
        task_postrun.connect(self._on_finish, weak=False)

    def _on_publish(self, **_: Any) -> None:
        with self._lock:
            self.published += 1

    def _on_finish(self, **_: Any) -> None:
        with self._lock:
            self.finished += 1

    def wait(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if self.published == self.finished:
                    return
            if time.monotonic() > deadline:
                raise SystemExit(f"worker not idle after {timeout_s:.0f} s")
            time.sleep(0.02)


def replay(
    env: BenchEnv, app: Celery, settings: Settings, oracle: Oracle, turns: list[Turn],
    exit_every: int,
) -> tuple[uuid.UUID, Counter[str]]:  # fmt: skip
    """Post every turn; wait for the worker after each job, as an agent's next turn would."""
    org_id = env.org_id()
    queue = CeleryJobQueue(app)
    debouncer = Debouncer.from_settings(env.redis, settings)
    idle = Idle()
    with UnitOfWork(env.session_factory, queue) as uow:
        sid = create_session(uow=uow, org_id=org_id, agent_id="bench", user_id="ada").session.id
        uow.commit()
    triggers: Counter[str] = Counter()
    for number, turn in enumerate(turns, start=1):
        with UnitOfWork(env.session_factory, queue) as uow:
            posted = post_message(
                uow=uow, org_id=org_id, session_id=sid, role=turn.role, content=turn.content,
                drift_interval=settings.drift_interval,
            )  # fmt: skip
            oracle.subject_of[posted.message.id] = turn.subject
            uow.commit()
        if posted.drift_evaluation_enqueued:
            idle.wait()
        if number % exit_every == 0 or number == len(turns):
            with UnitOfWork(env.session_factory, queue) as uow:
                status = request_evaluation(
                    uow=uow, debouncer=debouncer, queue=queue, org_id=org_id, session_id=sid,
                    trigger="visibility" if number < len(turns) else "disconnect",
                )  # fmt: skip
            triggers[status] += 1
            idle.wait()
    return sid, triggers


def mean(values: list[int]) -> float:
    return statistics.fmean(values) if values else 0.0


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--exit-every", type=int, default=50, help="an exit trigger every N")
    parser.add_argument("--dialogues", type=Path, help="a DialSeg711/TIAGE JSON file")
    parser.add_argument("--start", type=int, default=0, help="first dialogue of the file")
    args = parser.parse_args()
    host = machine()
    turns = (
        from_dialogues(args.dialogues, args.start, args.messages)
        if args.dialogues
        else scripted(args.messages)
    )
    source = f"{args.dialogues.name} from dialogue {args.start}" if args.dialogues else "built in"
    env = bench_env(args.admin_database_url)
    calls = Calls()
    with FakeOpenAI() as fake:
        oracle = Oracle(env, turns)
        fake.answer_with(oracle)
        settings = Settings(
            database_url=env.database_url, redis_url=env.redis_url, broker_url=env.broker_url,
            llm="openai", openai_base_url=fake.base_url, openai_api_key="x",
            debounce_ms=200,  # quicker than the default 2 s; it changes no count
        )  # fmt: skip
        app = make_celery(settings)
        import worker.tasks  # noqa: F401  (registers the tasks)

        context_of(app).llm = RecordingLLM(make_llm(settings), calls)
        with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False):
            session_id, triggers = replay(env, app, settings, oracle, turns, args.exit_every)
        requests = len(fake.requests)

    with env.uow() as uow:
        topics = uow.session.scalars(select(Topic).where(Topic.session_id == session_id)).all()
        rows = uow.session.scalars(
            select(Evaluation).where(Evaluation.topic_id.in_([t.id for t in topics]))
        ).all()
    by_trigger = Counter(f"{r.trigger}:{r.outcome}" for r in rows)
    drift, summary = len(calls.prompt["drift"]), len(calls.prompt["summary"])
    total_calls = drift + summary
    prompt = sum(sum(v) for v in calls.prompt.values())
    completion = sum(sum(v) for v in calls.completion.values())
    audited = (sum(r.prompt_tokens for r in rows), sum(r.completion_tokens for r in rows))
    users = sum(t.role == "user" for t in turns)
    subjects = len({t.subject for t in turns})

    print(
        f"bench/token_economy: {len(turns)} messages ({users} user + {len(turns) - users}"
        f" assistant, {subjects} subjects, {source}); heartbeat every"
        f" {settings.drift_interval}th message of a topic, exit trigger every"
        f" {args.exit_every} and at the end"
    )
    print(f"  machine: {host}")
    print(f"  exit triggers: {dict(triggers)}; topics at the end: {len(topics)}")
    print(f"  evaluations (trigger:outcome): {dict(sorted(by_trigger.items()))}")
    print(f"  {'':<28}{'calls':>7}{'prompt tok':>12}{'compl. tok':>12}{'/call p':>9}{'/call c':>9}")
    for kind in ("drift", "summary"):
        p, c = calls.prompt[kind], calls.completion[kind]
        label = "drift evaluations" if kind == "drift" else "summaries"
        print(f"  {label:<28}{len(p):>7}{sum(p):>12}{sum(c):>12}{mean(p):>9.0f}{mean(c):>9.0f}")
    print(f"  {'total':<28}{total_calls:>7}{prompt:>12}{completion:>12}")
    print(
        f"  LLM calls per user+assistant message: {total_calls / len(turns):.3f}"
        f"   tokens per message: {(prompt + completion) / len(turns):.0f}"
    )
    print(
        f"  tokens per summary: prompt {mean(calls.prompt['summary']):.0f},"
        f" completion {mean(calls.completion['summary']):.0f}"
        f" (FakeOpenAI's estimate: characters ÷ 4)"
    )
    print(
        f"  cross-checks: {requests} requests reached the server; the audit rows hold"
        f" {audited[0]} prompt + {audited[1]} completion tokens"
    )
    print(
        f"token_economy messages={len(turns)} llm_calls={total_calls}"
        f" calls_per_message={total_calls / len(turns):.3f} drift_calls={drift}"
        f" summary_calls={summary} summary_prompt_tokens={mean(calls.prompt['summary']):.0f}"
        f" summary_completion_tokens={mean(calls.completion['summary']):.0f}"
        f" drift_prompt_tokens={mean(calls.prompt['drift']):.0f}"
        f" prompt_tokens={prompt} completion_tokens={completion}"
        f" total_tokens={prompt + completion} topics={len(topics)}"
    )


if __name__ == "__main__":
    main()
