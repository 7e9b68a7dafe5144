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

A checkout may also run again under other settings, as a checkout of its own (a database,
a web, a row): `--variant LABEL:PATH:K=V,K=V` adds PATH's web with those variables, and
`--traced SAMPLER[=ARG]` adds this checkout's with traces on (OTEL_TRACES_SAMPLER=SAMPLER,
OTEL_TRACES_SAMPLER_ARG=ARG) to an OTLP/HTTP sink (bench/otlp_sink.py). Each variant whose
value names `{sink}` gets a sink process of its own, so the sink's CPU is not the web's and
its counts (spans, bytes) are the variant's alone.

    .venv/bin/python -m bench.post_path --baseline ../wt-a58 [--baseline ../wt-main]
        [--traced always_on] [--traced parentbased_traceidratio=0.1]
        [--variant LABEL:PATH:K=V,K=V] [--clients 32] [--requests 200] [--rounds 5]
        [--shares 0.5,0.75]

The last line is machine-readable (`key=value` pairs, per checkout label).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import statistics
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.common import (
    BENCH_DATABASE,
    BIN,
    BenchEnv,
    Subprocess,
    arguments,
    bench_env,
    cpu_seconds,
    machine,
    subprocess_running,
    wait_until,
)
from bench.http_throughput import (
    CHECKOUT,
    Phase,
    Request,
    free_port,
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
    sink: Sink | None = None
    key: str = ""
    sessions: list[uuid.UUID] = field(default_factory=list)
    posts: list[Phase] = field(default_factory=list)
    health: list[Phase] = field(default_factory=list)
    client_cpu_ms: list[float] = field(default_factory=list)
    paced: dict[float, Phase] = field(default_factory=dict)
    posts_sent: int = 0  # warm-ups included: each one is traced too

    @property
    def capacity(self) -> float:
        """The median round's posts/s."""
        return statistics.median(p.rps for p in self.posts)

    def median_of(self, phases: list[Phase], value: str) -> float:
        return statistics.median(getattr(p, value) for p in phases)


@dataclass(frozen=True)
class Variant:
    """A checkout served with extra environment (`{sink}` in a value: its sink's URL)."""

    label: str
    path: Path
    extra: dict[str, str]

    @property
    def wants_sink(self) -> bool:
        return any(SINK in value for value in self.extra.values())


SINK = "{sink}"


def variant(text: str) -> Variant:
    """`LABEL:PATH:K=V,K=V` (argparse's type for --variant)."""
    label, path, pairs = [*text.split(":", 2), "", ""][:3]
    if not label or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL:PATH:K=V,K=V")
    extra = dict(pair.split("=", 1) for pair in pairs.split(",") if "=" in pair)
    return Variant(label, Path(path).resolve(), extra)


def traced(text: str) -> Variant:
    """`SAMPLER[=ARG]` (argparse's type for --traced): this checkout, traces on, to a sink."""
    sampler, _, argument = text.partition("=")
    extra = {"OTEL_EXPORTER_OTLP_ENDPOINT": SINK, "OTEL_TRACES_SAMPLER": sampler}
    if argument:
        extra["OTEL_TRACES_SAMPLER_ARG"] = argument
    label = "traced" + (f"-{argument}" if argument else "")
    return Variant(label, CHECKOUT, extra)


@dataclass
class Sink:
    """A variant's OTLP/HTTP sink (bench/otlp_sink.py), a process of its own."""

    url: str
    process: Subprocess

    def stats(self) -> dict[str, Any]:
        """requests, bytes, spans: counts; names: the spans' names and how many of each."""
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as answer:
            counts: dict[str, Any] = json.load(answer)
            return counts


@contextlib.contextmanager
def sink_running(env: BenchEnv) -> Iterator[Sink]:
    """A sink process on a free port, once it answers; stopped by its pid at the end."""
    port = free_port()
    command = [str(BIN / "python"), "-m", "bench.otlp_sink", "--port", str(port)]
    with subprocess_running(command, env.process_environment(), cwd=CHECKOUT) as process:
        sink = Sink(f"http://127.0.0.1:{port}", process)
        wait_until(lambda: _answers(sink), timeout_s=30, what="otlp_sink", process=process)
        yield sink


def _answers(sink: Sink) -> bool:
    try:
        sink.stats()
        return True
    except OSError:
        return False


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


def prepare(
    env: BenchEnv, path: Path, index: int, taken: set[str], *,
    variant: Variant | None = None, sink: Sink | None = None,
) -> Checkout:  # fmt: skip
    """A database of the checkout's own, migrated and keyed by its own CLI."""
    database_url = services.recreate_database(
        services.admin_database_url(), f"{BENCH_DATABASE}_tree{index}"
    )
    environment = env.process_environment(
        DATABASE_URL=database_url,
        DRIFTLESS_ORG_REQUESTS_PER_S=BUCKET_NEVER_EMPTY,
        DRIFTLESS_ORG_REQUEST_BURST=BUCKET_NEVER_EMPTY,
    )
    # Traces are what the variant says, never the shell's: an OTEL_EXPORTER_OTLP_ENDPOINT
    # left in the environment would trace the baseline and the "off" row too.
    environment = {k: v for k, v in environment.items() if not k.startswith("OTEL_")}
    if variant is not None:
        url = sink.url if sink else ""
        environment |= {name: value.replace(SINK, url) for name, value in variant.extra.items()}
    label = variant.label if variant else label_of(path, taken)
    if label in taken and variant is not None:
        raise SystemExit(f"--variant {label}: that label is taken")
    taken.add(label)
    checkout = Checkout(label, path, environment, sink)
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
        checkout.posts_sent += len(requests) * (per_client + warmup)
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
    parser.add_argument(
        "--variant", action="append", type=variant, default=[], metavar="LABEL:PATH:K=V,K=V",
        help="PATH's web again, with these variables ({sink}: a sink's URL of its own)",
    )  # fmt: skip
    parser.add_argument(
        "--traced", action="append", type=traced, default=[], metavar="SAMPLER[=ARG]",
        help="this checkout's web again, traces on with this sampler, to a sink of its own",
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
    variants: list[Variant] = args.variant + args.traced
    with contextlib.ExitStack() as sinks:
        checkouts = [prepare(env, path, i, taken) for i, path in enumerate(paths)]
        for number, again in enumerate(variants, start=len(paths)):
            sink = sinks.enter_context(sink_running(env)) if again.wants_sink else None
            checkouts.append(prepare(env, again.path, number, taken, variant=again, sink=sink))
        run(env, checkouts, args, shares)


def run(
    env: BenchEnv, checkouts: list[Checkout], args: argparse.Namespace, shares: list[float]
) -> None:
    """Every checkout served at once: the closed-loop rounds, then the open-loop shares."""
    for checkout in checkouts:
        extra = " ".join(
            f"{name}={value}"
            for name, value in checkout.environment.items()
            if name.startswith("OTEL_")
        )
        print(f"  {checkout.label:<10} {checkout.path} {extra}".rstrip())
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
    # The webs are stopped: a traced one's exit shut its provider down (atexit), which
    # exported what its batch processor still held, so the sinks' counts are whole.
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
        name = key_name(checkout.label)
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
        if checkout.sink is not None:
            fields += sink_fields(checkout, name)
    print("post_path " + " ".join(fields))


def key_name(label: str) -> str:
    """A label as the machine-readable line's key prefix: letters, digits and `_`."""
    return re.sub(r"[^A-Za-z0-9]", "_", label.replace("+", "_dirty"))


def sink_fields(checkout: Checkout, name: str) -> list[str]:
    """What the variant's sink received, per request the web served (posts, their warm-ups,
    the sessions; probes are not traced), and the sink's own CPU per request."""
    assert checkout.sink is not None
    counts = checkout.sink.stats()
    served = len(checkout.sessions) + checkout.posts_sent
    sink_cpu_ms = cpu_seconds(checkout.sink.process.process.pid) * 1000
    print(
        f"  {checkout.label:<10} sink: {counts['requests']} exports, {counts['spans']} spans,"
        f" {counts['bytes'] / 1e6:.1f} MB for {served} requests:"
        f" {counts['spans'] / served:.2f} spans and {counts['bytes'] / served:.0f} bytes a"
        f" request, sink CPU {sink_cpu_ms / served:.3f} ms a request"
    )
    names = ", ".join(f"{name} {n / served:.2f}" for name, n in counts["names"].items())
    print(f"  {'':<10} spans a request: {names}")
    return [
        f"{name}_spans_per_request={counts['spans'] / served:.2f}",
        f"{name}_export_bytes_per_request={counts['bytes'] / served:.0f}",
        f"{name}_sink_cpu_ms={sink_cpu_ms / served:.3f}",
    ]


if __name__ == "__main__":
    main()
