"""bench/backlog ([4.2b]): a backlog is not lost work. The Procfile's worker and beat
(DRIFTLESS_RECONCILE_S=10, so the reconciler runs every 10 s through the whole backlog)
against the tests' scripted model at `--latency` seconds a call, in one run:

  1. alone:   one org closes `--alone` topics (600) at once; its drain rate;
  2. backlog: org A closes `--backlog` topics (3,000) at once, and behind them org B
              closes `--late` (10) over 5 s; A's drain rate, and B's close to readable.

For each phase, from the worker's own metrics (scraped before and after): the summary
jobs run (`driftless_jobs_succeeded_total`, a ticket's job under its own name) against
the topics closed, and what the reconciler sent again (`driftless_reconcile_recovered_total`
by kind); and the model calls. The goals: the backlog drains at >= 0.9 x the rate alone,
and the jobs run are the topics closed plus at most 1 %.

    .venv/bin/python -m bench.backlog [--alone 600] [--backlog 3000] [--late 10]
        [--latency 1.0] [--baseline-tree PATH]

`--baseline-tree` first runs the same phases on another checkout's worker and beat (a
git worktree of the previous code: its directory as their working directory and
PYTHONPATH), on a database and Redis emptied again; its rows are labelled `baseline`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.common import (
    BIN,
    PROCFILE,
    SUMMARY_ANSWER,
    BenchEnv,
    Subprocess,
    arguments,
    bench_env,
    machine,
    subprocess_running,
    wait_until,
    worker_command,
)
from bench.fairness import Late, Watch, close, count_summarized, new_org, sessions_with_messages
from bench.http_throughput import free_port
from shared.infra.config import Settings
from shared.infra.fair import FairQueue
from shared.infra.queue import SUMMARIZE_TOPIC, CeleryJobQueue
from tests.llm_server import FakeOpenAI
from worker.app import make_celery

RECONCILE_S = 10
SPREAD_S = 5.0  # B's closes span this long, from A's


def beat_command() -> list[str]:
    """The Procfile's `beat:` line, run from this virtualenv, its schedule file its own."""
    found = re.search(r"^beat:\s*(.+)$", PROCFILE.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"{PROCFILE} has no beat: line")
    words = shlex.split(found.group(1))
    if "--schedule" in words:
        words[words.index("--schedule") + 1] = f"/tmp/bench-backlog-{uuid.uuid4().hex[:8]}"
    return [str(BIN / words[0]), *words[1:], "--loglevel", "WARNING"]


def counters(port: int) -> dict[str, float]:
    """The worker's summary jobs run and the reconciler's resends by kind, right now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "driftless_jobs_succeeded_total" and (
                sample.labels.get("task") == SUMMARIZE_TOPIC
            ):
                found["jobs"] = found.get("jobs", 0.0) + sample.value
            elif sample.name == "driftless_reconcile_recovered_total":
                kind = "resent_" + sample.labels["kind"]
                found[kind] = found.get(kind, 0.0) + sample.value
    return found


@dataclass
class Phase:
    label: str  # which code
    name: str  # alone / backlog
    closed: int  # the first org's topics closed at once
    late: int  # the second org's, behind them
    drained_s: float  # the first org's closes to its last summary readable
    jobs: int  # summary jobs the worker ran
    calls: int  # model calls
    resent: dict[str, int]  # by the reconciler, by kind
    late_max_s: float  # the second org's close to readable, the longest

    @property
    def topics(self) -> int:
        return self.closed + self.late

    @property
    def rate(self) -> float:
        return self.closed / self.drained_s


def run_phase(
    env: BenchEnv, queue: CeleryJobQueue, fake: FakeOpenAI, port: int, *, label: str,
    name: str, count: int, late: int, latency: float, process: Subprocess,
) -> Phase:  # fmt: skip
    org = new_org(env, f"{name}-a")
    sessions = sessions_with_messages(env, org, count, f"{name}-a")
    lates = []
    if late:
        org_b = new_org(env, f"{name}-b")
        for n in range(late):
            [session_id] = sessions_with_messages(env, org_b, 1, f"{name}-late{n}")
            lates.append(Late(f"{name}-late{n}-0", org_b, session_id))
    before, calls_before = counters(port), fake.calls
    jobs = close(env, org, sessions)
    topic_ids = [uuid.UUID(job.kwargs["topic_id"]) for job in jobs]
    started = time.time()
    for job in jobs:
        queue.send(job)
    watch = Watch(env, lates)
    watcher = threading.Thread(target=watch.run, daemon=True)
    watcher.start()
    for n, item in enumerate(lates):
        time.sleep(max(0.0, started + n * SPREAD_S / max(1, late - 1) - time.time()))
        item.closed_at = time.time()
        [sent] = close(env, item.org_id, [item.session_id])
        item.topic_id = uuid.UUID(sent.kwargs["topic_id"])
        queue.send(sent)
    wait_until(
        lambda: count_summarized(env, topic_ids) == count,
        timeout_s=300 + 3 * count * latency, what=f"{label} {name}", process=process,
        poll_s=0.2,
    )  # fmt: skip
    drained = time.time() - started
    watcher.join(timeout=120)
    watch.done.set()
    time.sleep(RECONCILE_S + 2)  # a reconcile run after the drain, and its jobs, counted too
    after = counters(port)
    resent = {k.removeprefix("resent_"): int(v - before.get(k, 0.0)) for k, v in after.items()
              if k.startswith("resent_") and v - before.get(k, 0.0)}  # fmt: skip
    late_s = [(item.readable_at or float("nan")) - item.closed_at for item in lates]
    return Phase(
        label, name, count, late, drained, int(after.get("jobs", 0) - before.get("jobs", 0)),
        fake.calls - calls_before, resent, max(late_s, default=0.0),
    )  # fmt: skip


def run_tree(
    args: argparse.Namespace, label: str, tree: Path | None, fake: FakeOpenAI
) -> list[Phase]:
    env = bench_env(args.admin_database_url)
    settings = Settings(database_url=env.database_url, redis_url=env.redis_url,
                        broker_url=env.broker_url)  # fmt: skip
    app = make_celery(settings)
    queue = CeleryJobQueue(app, FairQueue(env.redis))
    port = free_port()
    environment = env.process_environment(
        DRIFTLESS_LLM="openai", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="x",
        DRIFTLESS_RECONCILE_S=str(RECONCILE_S), DRIFTLESS_WORKER_METRICS_PORT=str(port),
        DRIFTLESS_LLM_TIMEOUT_S="30",
        **({"PYTHONPATH": str(tree)} if tree else {}),
    )  # fmt: skip
    phases = []
    with contextlib.ExitStack() as stack:
        worker = stack.enter_context(subprocess_running(worker_command(), environment, cwd=tree))
        stack.enter_context(subprocess_running(beat_command(), environment, cwd=tree))
        wait_until(lambda: _answers(port), timeout_s=60, what="worker metrics", process=worker)
        for name, count, late in (("alone", args.alone, 0), ("backlog", args.backlog, args.late)):
            print(f"  {label}: {name} ({count} + {late}) ...", flush=True)
            phases.append(run_phase(
                env, queue, fake, port, label=label, name=name, count=count, late=late,
                latency=args.latency, process=worker,
            ))  # fmt: skip
    app.close()
    env.engine.dispose()
    return phases


def _answers(port: int) -> bool:
    try:
        counters(port)
    except OSError:
        return False
    return True


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--alone", type=int, default=600, help="one org's closes, alone")
    parser.add_argument("--backlog", type=int, default=3000, help="org A's closes at once")
    parser.add_argument("--late", type=int, default=10, help="org B's closes behind A's")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per model call")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="a checkout of the previous code, run the same way first")  # fmt: skip
    args = parser.parse_args()
    host = machine()
    trees: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline_tree:
        trees.insert(0, ("baseline", args.baseline_tree.resolve()))
    phases: list[Phase] = []
    with FakeOpenAI() as fake:
        fake.slow(args.latency, SUMMARY_ANSWER)
        for label, tree in trees:
            phases += run_tree(args, label, tree, fake)
    print(f"bench/backlog: the Procfile's worker and beat, DRIFTLESS_RECONCILE_S={RECONCILE_S},"
          f" model at {args.latency:g} s a call")  # fmt: skip
    print(f"  worker: {' '.join(worker_command()[1:])}")
    print(f"  machine: {host} (os.cpu_count()={os.cpu_count()})")
    print(f"  {'code':<10}{'phase':<9}{'topics':>7}{'drain s':>9}{'per s':>8}{'x alone':>9}"
          f"{'jobs':>7}{'extra':>8}{'calls':>7}{'B max s':>9}  resent (reconciler)")  # fmt: skip
    alone = {p.label: p.rate for p in phases if p.name == "alone"}
    for p in phases:
        extra = (p.jobs - p.topics) / p.topics
        resent = ", ".join(f"{k} {v}" for k, v in sorted(p.resent.items())) or "none"
        late = f"{p.late_max_s:>9.2f}" if p.late else f"{'':>9}"
        print(f"  {p.label:<10}{p.name:<9}{p.topics:>7}{p.drained_s:>9.1f}{p.rate:>8.1f}"
              f"{p.rate / alone[p.label]:>9.2f}{p.jobs:>7}{extra:>8.1%}{p.calls:>7}{late}"
              f"  {resent}")  # fmt: skip
    print("backlog " + " ".join(
        f"{p.label}_{p.name}_per_s={p.rate:.1f} {p.label}_{p.name}_extra_jobs={p.jobs - p.topics}"
        for p in phases
    ))  # fmt: skip


if __name__ == "__main__":
    main()
