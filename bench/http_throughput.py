"""bench/http_throughput (P1): POST /messages against GET /healthz on the same server.

The real server as a subprocess: the Procfile's `web` command (`--server procfile`, the
default) or the [2.2] one it replaced (`--server gthread`: gunicorn --workers 2
--threads 8), or both one after the other (`--server both`), on the machine's
PostgreSQL and Redis, with a
real Celery broker: every 10th message of a topic enqueues a heartbeat evaluation
(R26), and no worker runs, so those jobs pile up in the broker's `llm` queue (counted
at the end, to show the web enqueued for real). Clients are threads in this process,
each with one keep-alive connection (`http.client`) and a session of its own; each
warms up, then all start together and send N requests each. Prints req/s, p50 and p99
of both routes and their ratios (messages ÷ healthz).

Both the clients and the server run on this machine, so they share its CPUs: read the
numbers as a ratio on one machine, not as the server's capacity. A shared machine's
speed drifts by a third within minutes, so the two routes alternate, `--rounds` times
(healthz, then messages, right after it), and the summary is the round of median ratio.

    .venv/bin/python -m bench.http_throughput [--clients 32] [--requests 200] [--rounds 3]
        [--server procfile|gthread|both]

bench/turn.py and bench/batch_import.py start their server with `web_server` below.

The last line is machine-readable (`key=value` pairs).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import shlex
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.common import (
    BIN,
    BenchEnv,
    Subprocess,
    arguments,
    bench_env,
    cpu_seconds,
    machine,
    percentile,
    subprocess_running,
    wait_until,
)
from shared.infra.heap import freeze_startup_objects
from shared.infra.queue import LLM_QUEUE
from shared.sessions.service import create_session

# A typical chat turn: a couple of sentences.
CONTENT = (
    "Let's keep the billing service on PostgreSQL 16 with Celery on Redis for retries;"
    " invoices are in EUR and the migration deadline is March 3. Owner: Ada."
)

Request = Callable[[http.client.HTTPConnection, int], None]
# What a keep-alive connection the server already closed raises. The request never
# reached a worker (gunicorn closes only idle connections), so sending it again is safe.
STALE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


@dataclass(frozen=True)
class Phase:
    name: str
    latencies_ms: list[float]
    elapsed_s: float
    reconnects: int  # connections the server had closed, reopened (see STALE)
    server_cpu_s: float  # user + system CPU of the web's processes while it ran

    @property
    def cpu_ms_per_request(self) -> float:
        """The web's own CPU per request: steadier than req/s on a host whose speed drifts."""
        return self.server_cpu_s * 1000 / len(self.latencies_ms)

    @property
    def rps(self) -> float:
        return len(self.latencies_ms) / self.elapsed_s

    def p(self, share: float) -> float:
        return percentile(self.latencies_ms, share)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def healthz(connection: http.client.HTTPConnection, _: int) -> None:
    connection.request("GET", "/healthz")
    _expect(connection, 200)


def post_message(key: str, session_id: uuid.UUID) -> Request:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    path = f"/agents-api/sessions/{session_id}/messages"

    def post(connection: http.client.HTTPConnection, number: int) -> None:
        role = "user" if number % 2 == 0 else "assistant"
        body = json.dumps({"role": role, "content": f"{number}: {CONTENT}"})
        connection.request("POST", path, body=body, headers=headers)
        _expect(connection, 201)

    return post


def _expect(connection: http.client.HTTPConnection, status: int) -> None:
    response = connection.getresponse()
    payload = response.read()  # read it all, or the connection cannot be reused
    if response.status != status:
        raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")


def run_phase(
    name: str, server: Subprocess, port: int, requests: list[Request], *, per_client: int,
    warmup: int, offered_rps: float | None = None,
) -> Phase:  # fmt: skip
    """One thread and one keep-alive connection per client; all start together.

    Each client sends its next request as soon as it has the answer (the server's
    saturation), or, with `offered_rps`, on a schedule: the clients together offer that
    many requests a second, and a request's latency counts from when it was due, not
    from when a late client got round to sending it (no coordinated omission).

    The clients' own objects are frozen first (shared/infra/heap.py): a full collection of
    this process stops all its client threads at once, which read as the server's p99.
    """
    freeze_startup_objects()
    started: list[float] = []
    start = threading.Barrier(len(requests) + 1, action=lambda: started.append(time.perf_counter()))
    # With a schedule, client i sends at started + (n + i / clients) * interval.
    interval_s = len(requests) / offered_rps if offered_rps else None
    latencies: list[list[float]] = [[] for _ in requests]
    finished: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    reconnects = [0]

    def send(connection: http.client.HTTPConnection, request: Request, number: int) -> None:
        try:
            request(connection, number)
        except STALE:  # gunicorn closed it (idle past its keep-alive): as a client would, retry
            connection.close()
            with lock:
                reconnects[0] += 1
            request(connection, number)

    def client(index: int, request: Request) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for number in range(warmup):
                send(connection, request, number)
            start.wait()
            # Waiting at the barrier may outlast gunicorn's keep-alive (2 s): start afresh.
            connection.close()
            connection.connect()
            for n, number in enumerate(range(warmup, warmup + per_client)):
                began = time.perf_counter()
                if interval_s is not None:
                    due = started[0] + (n + index / len(requests)) * interval_s
                    time.sleep(max(0.0, due - began))
                    began = due
                send(connection, request, number)
                latencies[index].append((time.perf_counter() - began) * 1000)
        except BaseException as exc:
            with lock:
                errors.append(exc)
            start.abort()
        finally:
            connection.close()
            with lock:
                finished.append(time.perf_counter())

    threads = [
        threading.Thread(target=client, args=(i, r), daemon=True) for i, r in enumerate(requests)
    ]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a client failed: see below
        start.wait()
    began, cpu_before = time.perf_counter(), cpu_seconds(server.process.pid)
    for thread in threads:
        thread.join()
    server_cpu_s = cpu_seconds(server.process.pid) - cpu_before
    if errors:
        raise SystemExit(f"{name}: a client failed: {errors[0]!r}")
    return Phase(
        name,
        [ms for per in latencies for ms in per],
        max(finished) - began,
        reconnects[0],
        server_cpu_s,
    )


@dataclass(frozen=True)
class Round:
    """One healthz phase and the messages phase right after it, on the same server."""

    health: Phase
    messages: Phase

    @property
    def ratio(self) -> float:
        return self.messages.rps / self.health.rps


def make_sessions(env: BenchEnv, count: int) -> list[uuid.UUID]:
    org_id = env.org_id()
    with env.uow() as uow:
        ids = [
            create_session(
                uow=uow, org_id=org_id, agent_id="bench", user_id=f"client-{i}"
            ).session.id
            for i in range(count)
        ]
        uow.commit()
    return ids


def server_answers(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        healthz(connection, 0)
        return True
    except (OSError, RuntimeError, http.client.HTTPException):
        return False
    finally:
        connection.close()


# The servers a run can compare: the Procfile's `web` line as it is now, and the
# threaded command it replaced in [2.3] (one stream or request per thread).
CHECKOUT = Path(__file__).resolve().parent.parent
PROCFILE = CHECKOUT / "Procfile"
SERVERS = ("procfile", "gthread")
GTHREAD = "gunicorn --bind 0.0.0.0:${PORT:-8000} --workers 2 --threads 8 web.app:create_app()"


def server_command(server: str, port: int, *, tree: Path = CHECKOUT) -> list[str]:
    """The web command of `server`, bound to 127.0.0.1:port, its access log left out
    (the same for both: a log line per request is the operator's choice, not the app's).

    `tree` is the checkout whose Procfile and virtualenv serve: this one, or another
    one's (bench/post_path.py runs an older commit's web beside this one's)."""
    line = GTHREAD
    if server == "procfile":
        procfile = tree / "Procfile"
        found = re.search(r"^web:\s*(.+)$", procfile.read_text(), re.MULTILINE)
        if found is None:
            raise SystemExit(f"{procfile} has no web: line")
        line = found.group(1)
    words = shlex.split(line.replace("${PORT:-8000}", str(port)))
    words = [w.replace(f"0.0.0.0:{port}", f"127.0.0.1:{port}") for w in words]
    programs = BIN if tree == CHECKOUT else tree / ".venv" / "bin"
    return [str(programs / words[0]), *words[1:]]


@contextlib.contextmanager
def web_server(
    env: BenchEnv,
    server: str,
    *,
    tree: Path = CHECKOUT,
    environment: dict[str, str] | None = None,
) -> Iterator[tuple[int, Subprocess]]:
    """`server`'s web command (of the checkout `tree`) as a subprocess on a free port, once
    /healthz answers; `environment` replaces the bench's (another database, say)."""
    port = free_port()
    command = server_command(server, port, tree=tree)
    environment = environment or env.process_environment()
    with subprocess_running(command, environment, cwd=tree) as process:
        wait_until(lambda: server_answers(port), timeout_s=60, what="gunicorn", process=process)
        yield port, process
        process.check_alive("gunicorn")


def _print_phase(server: str, round_name: str, phase: Phase) -> None:
    print(
        f"  {server:<9} {round_name:>5} {phase.name:<42} {phase.rps:9.1f} {phase.p(0.5):9.2f}"
        f" {phase.p(0.99):9.2f} {phase.reconnects:>7} {phase.cpu_ms_per_request:15.3f}"
    )


def servers(choice: str) -> list[str]:
    return list(SERVERS) if choice == "both" else [choice]


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=200, help="per client and route")
    parser.add_argument("--warmup", type=int, default=20, help="per client and route")
    parser.add_argument("--server", choices=[*SERVERS, "both"], default="procfile")
    parser.add_argument(
        "--rounds", type=int, default=3, help="healthz then messages, this many times over"
    )
    parser.add_argument(
        "--paced-share", type=float, default=0.6,
        help="then messages offered at this share of the median round's rate (0: skip)",
    )  # fmt: skip
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    print(
        f"bench/http_throughput: {args.clients} keep-alive clients x {args.requests} requests"
        f" (after {args.warmup} warm-up) per route; machine: {host} (clients and server share it)"
    )
    print(
        f"  {'server':<9} {'round':>5} {'route':<42} {'req/s':>9} {'p50 ms':>9} {'p99 ms':>9}"
        f" {'reconn':>7} {'web CPU ms/req':>15}"
    )
    results = []
    for server in servers(args.server):
        sessions = make_sessions(env, args.clients)
        rounds: list[Round] = []
        with web_server(env, server) as (port, process):
            for number in range(1, args.rounds + 1):
                health = run_phase(
                    "GET /healthz", process, port, [healthz] * args.clients,
                    per_client=args.requests, warmup=args.warmup,
                )  # fmt: skip
                messages = run_phase(
                    "POST /agents-api/sessions/{id}/messages", process, port,
                    [post_message(env.org_key, s) for s in sessions],
                    per_client=args.requests, warmup=args.warmup,
                )  # fmt: skip
                rounds.append(Round(health, messages))
                _print_phase(server, str(number), health)
                _print_phase(server, str(number), messages)
            middle = sorted(rounds, key=lambda r: r.ratio)[(len(rounds) - 1) // 2]  # the median
            paced = None
            if args.paced_share > 0:  # latency below saturation, where a service runs
                offered = args.paced_share * middle.messages.rps
                paced = run_phase(
                    f"POST …/messages offered {offered:.0f}/s", process, port,
                    [post_message(env.org_key, s) for s in sessions],
                    per_client=args.requests, warmup=args.warmup, offered_rps=offered,
                )  # fmt: skip
                _print_phase(server, "paced", paced)
        print(f"  {server:<9} {'all':>5} {'ratio messages ÷ healthz, per round':<42}", end="")
        print("  " + ", ".join(f"{r.ratio:.3f}" for r in rounds) + f"  (median {middle.ratio:.3f})")
        results.append((server, middle, paced))
    waiting = redis.Redis.from_url(env.broker_url).llen(LLM_QUEUE)
    message_phases = args.rounds + (1 if args.paced_share > 0 else 0)
    posted = len(results) * message_phases * args.clients * (args.requests + args.warmup)
    print(
        f"  heartbeat jobs waiting in the broker's '{LLM_QUEUE}' queue (no worker runs):"
        f" {waiting} for {posted} messages"
    )
    fields = [f"clients={args.clients}", f"rounds={args.rounds}", f"broker_jobs={waiting}"]
    for server, middle, paced in results:  # the median round's numbers
        health, messages = middle.health, middle.messages
        fields += [
            f"{server}_healthz_rps={health.rps:.1f}",
            f"{server}_healthz_p99_ms={health.p(0.99):.2f}",
            f"{server}_messages_rps={messages.rps:.1f}",
            f"{server}_messages_p50_ms={messages.p(0.5):.2f}",
            f"{server}_messages_p99_ms={messages.p(0.99):.2f}",
            f"{server}_healthz_cpu_ms={health.cpu_ms_per_request:.3f}",
            f"{server}_messages_cpu_ms={messages.cpu_ms_per_request:.3f}",
            f"{server}_rps_ratio={middle.ratio:.3f}",
        ]
        if paced is not None:
            fields += [
                f"{server}_paced_rps={paced.rps:.1f}",
                f"{server}_paced_p50_ms={paced.p(0.5):.2f}",
                f"{server}_paced_p99_ms={paced.p(0.99):.2f}",
            ]
    print("http_throughput " + " ".join(fields))


if __name__ == "__main__":
    main()
