"""bench/post_path ([4.2]): single message posts, this checkout's web beside older ones'.

A change to the post path is judged against the code before it on the same machine in
the same run: a shared machine's speed drifts by a third within minutes, more than most
changes. So this bench serves several checkouts at once, each a git worktree with its own
virtualenv (`git worktree add ../wt-old COMMIT && make -C ../wt-old install`), each from
its own Procfile `web` line, on a database of its own migrated by its own
`driftless db upgrade` (docs/contract.md), with a key from its own `driftless keys create`
and sessions made over HTTP: nothing of this checkout's code runs in another's.

The request bucket stays on (every API request takes a token in Redis), at a rate
(DRIFTLESS_ORG_REQUESTS_PER_S) no bench reaches, so its cost is in and no post is a 429.
A checkout from before the bucket ignores the variable.

- Capacity, closed loop: `--rounds` rounds; in each, every checkout in turn (the order
  reversed every other round, so none always runs first) answers `GET /healthz` and then
  single posts from `--clients` keep-alive clients, each sending its next request as soon
  as it has the answer. The checkout's capacity is its median round's posts/s.
- The tail, open loop: posts offered at a fixed rate, each share of `--shares` (default
  half and three quarters) of the checkout's own capacity; a request's latency counts
  from when it was due, not from when a late client got round to it (no coordinated
  omission: bench/http_throughput.py's `run_phase`). p50 and p99 of each.

Clients and servers share the machine's CPUs, so each phase also prints the web's CPU per
request (its processes' user + system) and the clients' own: steadier than req/s.

    .venv/bin/python -m bench.post_path --baseline ../wt-a58 [--baseline ../wt-main]
        [--clients 32] [--requests 200] [--rounds 5] [--shares 0.5,0.75]

The last line is machine-readable (`key=value` pairs, per checkout label).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import statistics
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.common import BENCH_DATABASE, BenchEnv, Subprocess, arguments, bench_env, machine
from bench.http_throughput import (
    CHECKOUT,
    Phase,
    Request,
    healthz,
    post_message,
    run_phase,
    web_server,
)
from tests import services

# The request bucket's rate and burst for every checkout: on, and never what limits.
BUCKET_NEVER_EMPTY = "1000000"


@dataclass
class Checkout:
    """One tree under test: where it is, what it is called, and what its web runs on."""

    label: str
    path: Path
    environment: dict[str, str]
    key: str = ""
    sessions: list[uuid.UUID] = field(default_factory=list)
    posts: list[Phase] = field(default_factory=list)
    health: list[Phase] = field(default_factory=list)
    client_cpu_ms: list[float] = field(default_factory=list)
    paced: dict[float, Phase] = field(default_factory=dict)

    @property
    def capacity(self) -> float:
        """The median round's posts/s."""
        return statistics.median(p.rps for p in self.posts)

    def median_of(self, phases: list[Phase], value: str) -> float:
        return statistics.median(getattr(p, value) for p in phases)


def label_of(path: Path, taken: set[str]) -> str:
    """The tree's short commit, `+` when it has uncommitted changes; unique in the run."""
    commit = _git(path, "rev-parse", "--short", "HEAD")
    label = commit + ("+" if _git(path, "status", "--porcelain", "--untracked-files=no") else "")
    while label in taken:
        label += "'"
    taken.add(label)
    return label


def _git(path: Path, *words: str) -> str:
    return subprocess.run(
        ["git", "-C", str(path), *words], check=True, capture_output=True, text=True
    ).stdout.strip()


def prepare(env: BenchEnv, path: Path, index: int, taken: set[str]) -> Checkout:
    """A database of the checkout's own, migrated and keyed by its own CLI."""
    database_url = services.recreate_database(
        services.admin_database_url(), f"{BENCH_DATABASE}_tree{index}"
    )
    environment = env.process_environment(
        DATABASE_URL=database_url,
        DRIFTLESS_ORG_REQUESTS_PER_S=BUCKET_NEVER_EMPTY,
        DRIFTLESS_ORG_REQUEST_BURST=BUCKET_NEVER_EMPTY,
    )
    checkout = Checkout(label_of(path, taken), path, environment)
    checkout.key = _driftless(checkout, "keys", "create", f"bench-{uuid.uuid4().hex[:8]}")
    return checkout


def _driftless(checkout: Checkout, *words: str) -> str:
    """Run the checkout's own `driftless` (migrating first); its last line of stdout."""
    program = str(checkout.path / ".venv" / "bin" / "driftless")
    for command in (["db", "upgrade"], list(words)):
        done = subprocess.run(
            [program, *command], env=checkout.environment, cwd=checkout.path,
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{checkout.path}: driftless {' '.join(command)}:\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def make_sessions(port: int, key: str, count: int) -> list[uuid.UUID]:
    """`count` sessions, made over HTTP (the checkout's own code makes them)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    ids = []
    try:
        for number in range(count):
            body = json.dumps({"agentId": "bench", "userId": f"client-{number}"})
            connection.request("POST", "/agents-api/sessions", body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            if response.status != 201:
                raise SystemExit(f"POST /sessions: HTTP {response.status}: {answer[:300]!r}")
            ids.append(uuid.UUID(json.loads(answer)["id"]))
    finally:
        connection.close()
    return ids


@contextlib.contextmanager
def serving(
    env: BenchEnv, checkouts: list[Checkout]
) -> Iterator[list[tuple[Checkout, int, Subprocess]]]:
    """Every checkout's web at once, each on its own port."""
    with contextlib.ExitStack() as stack:
        running = []
        for checkout in checkouts:
            port, process = stack.enter_context(
                web_server(env, "procfile", tree=checkout.path, environment=checkout.environment)
            )
            running.append((checkout, port, process))
        yield running


def measured(
    name: str, process: Subprocess, port: int, checkout: Checkout, *, route: str,
    per_client: int, warmup: int, clients: int, offered_rps: float | None = None,
) -> tuple[Phase, float]:  # fmt: skip
    """One phase, and the clients' own CPU ms per request (this process)."""
    requests: list[Request]
    if route == "healthz":
        requests = [healthz] * clients
    else:
        requests = [post_message(checkout.key, s) for s in checkout.sessions]
    before = psutil.Process().cpu_times()
    phase = run_phase(
        name, process, port, requests, per_client=per_client, warmup=warmup,
        offered_rps=offered_rps,
    )  # fmt: skip
    after = psutil.Process().cpu_times()
    used_s = (after.user - before.user) + (after.system - before.system)
    return phase, used_s * 1000 / len(phase.latencies_ms)


def _print(checkout: Checkout, round_name: str, phase: Phase, client_ms: float) -> None:
    print(
        f"  {checkout.label:<10} {round_name:>6} {phase.name:<30} {phase.rps:8.1f}"
        f" {phase.p(0.5):8.2f} {phase.p(0.99):8.2f} {phase.cpu_ms_per_request:8.3f}"
        f" {client_ms:8.3f}",
        flush=True,
    )


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument(
        "--baseline", action="append", type=Path, default=[],
        help="another checkout (a worktree with its .venv) to measure beside this one",
    )  # fmt: skip
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=200, help="per client and phase")
    parser.add_argument("--warmup", type=int, default=20, help="per client and phase")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--shares", default="0.5,0.75", help="open loop: posts offered at these shares of capacity"
    )
    args = parser.parse_args()
    shares = [float(s) for s in args.shares.split(",") if s.strip()]
    print(
        f"bench/post_path: {args.clients} keep-alive clients x {args.requests} requests"
        f" (after {args.warmup} warm-up) per phase; machine: {machine()}"
    )
    env = bench_env(args.admin_database_url)
    taken: set[str] = set()
    paths = [p.resolve() for p in args.baseline] + [CHECKOUT]
    checkouts = [prepare(env, path, i, taken) for i, path in enumerate(paths)]
    for checkout in checkouts:
        print(f"  {checkout.label:<10} {checkout.path}")
    print(
        f"  {'checkout':<10} {'round':>6} {'phase':<30} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'web ms':>8} {'client ms':>8}   (CPU ms per request)"
    )
    with serving(env, checkouts) as running:
        for checkout, port, _ in running:
            checkout.sessions = make_sessions(port, checkout.key, args.clients)
        for number in range(1, args.rounds + 1):
            order = running if number % 2 else running[::-1]
            for checkout, port, process in order:
                common = {"per_client": args.requests, "warmup": args.warmup}
                health, client_ms = measured(
                    "GET /healthz", process, port, checkout, route="healthz",
                    clients=args.clients, **common,
                )  # fmt: skip
                checkout.health.append(health)
                _print(checkout, str(number), health, client_ms)
                posts, client_ms = measured(
                    "POST …/messages", process, port, checkout, route="posts",
                    clients=args.clients, **common,
                )  # fmt: skip
                checkout.posts.append(posts)
                checkout.client_cpu_ms.append(client_ms)
                _print(checkout, str(number), posts, client_ms)
        for share in shares:
            for checkout, port, process in running:
                offered = share * checkout.capacity
                paced, client_ms = measured(
                    f"POST offered {offered:.0f}/s", process, port, checkout, route="posts",
                    clients=args.clients, per_client=args.requests, warmup=args.warmup,
                    offered_rps=offered,
                )  # fmt: skip
                checkout.paced[share] = paced
                _print(checkout, f"{share:.0%}", paced, client_ms)
    summarize(checkouts, shares)


def summarize(checkouts: list[Checkout], shares: list[float]) -> None:
    first = checkouts[0]
    print("\n  medians over the rounds (open loop: one phase each)")
    header = f"  {'checkout':<10} {'healthz/s':>10} {'posts/s':>9} {'x ' + first.label:>11}"
    header += f" {'web ms/post':>12}" + "".join(f" {f'p99 @{s:.0%}':>10}" for s in shares)
    print(header)
    fields = [f"rounds={len(first.posts)}", f"clients={len(first.sessions)}"]
    for checkout in checkouts:
        web_ms = checkout.median_of(checkout.posts, "cpu_ms_per_request")
        health = checkout.median_of(checkout.health, "rps")
        ratio = checkout.capacity / first.capacity
        line = f"  {checkout.label:<10} {health:10.1f} {checkout.capacity:9.1f} {ratio:11.3f}"
        line += f" {web_ms:12.3f}"
        line += "".join(f" {checkout.paced[s].p(0.99):10.2f}" for s in shares)
        print(line)
        spread = ", ".join(f"{p.rps:.0f}" for p in checkout.posts)
        print(f"  {'':<10} posts/s per round: {spread}")
        name = checkout.label.replace("+", "_dirty").replace("'", "_")
        fields += [
            f"{name}_healthz_rps={health:.1f}",
            f"{name}_posts_rps={checkout.capacity:.1f}",
            f"{name}_ratio={ratio:.3f}",
            f"{name}_web_cpu_ms={web_ms:.3f}",
        ]
        for share in shares:
            paced = checkout.paced[share]
            percent = round(share * 100)
            fields += [
                f"{name}_p50_at_{percent}_ms={paced.p(0.5):.2f}",
                f"{name}_p99_at_{percent}_ms={paced.p(0.99):.2f}",
            ]
    print("post_path " + " ".join(fields))


if __name__ == "__main__":
    main()
