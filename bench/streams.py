"""bench/streams ([2.3]): 1,000 open event streams against /healthz and message posts.

The real server as a subprocess, started with the Procfile's `web` command word for word
(only $PORT chosen here), on the machine's PostgreSQL and Redis; no Celery worker runs
(the heartbeat jobs that message posts enqueue wait in the broker). The same run then
starts the command the Procfile had before [2.3] (gunicorn `--workers 2 --threads 8`)
for comparison. For each command:

1. Open `--streams` `GET …/events` (default 1,000) from `--orgs` orgs (default 50: 20
   streams each, the default `DRIFTLESS_MAX_STREAMS_PER_ORG`, which stays as shipped),
   each on a session of its own. The clients are plain sockets in one selector loop (an
   idle stream costs the client nothing); requests go out in batches, and each answer
   is counted: 200 with its `ready` event, or 429 with its error code. Admitted streams
   stay open, read (pings) by one thread, until the end of the run.
2. With them open: `--clients` keep-alive HTTP clients (threads) send `--requests`
   GET /healthz each, then as many POST …/messages (a session each): req/s, p50, p99;
   while the messages are posted, one more client probes GET /healthz every 20 ms
   ("probe": what a load balancer's health check sees under load).
3. Reported too: the server's memory (RSS of master and workers), how the streams
   spread over its worker processes, its Redis subscriber connections, the CPU it
   burns with the streams open and no requests (10 s: pings and lease renewals), and
   its CPU per message post (less sensitive to the machine's other load than req/s).

Clients and server share the machine's CPUs: read the numbers as old against new on one
machine, not as a capacity.

    DRIFTLESS_BENCH_DATABASE=driftless_bench_s DRIFTLESS_BENCH_REDIS_DB=3 \\
    DRIFTLESS_BENCH_BROKER_DB=2 .venv/bin/python -m bench.streams \\
        [--streams 1000] [--orgs 50] [--clients 16] [--requests 100] [--skip-old]

The last line is machine-readable (`key=value` pairs).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import selectors
import shlex
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

from bench.common import (
    BIN,
    BenchEnv,
    arguments,
    bench_env,
    cpu_seconds,
    machine,
    percentile,
    subprocess_running,
    wait_until,
)
from bench.http_throughput import (
    STALE,
    Phase,
    free_port,
    healthz,
    make_sessions,
    post_message,
    run_phase,
    server_answers,
)
from shared.auth.service import create_api_key, org_for_key
from shared.sessions.service import create_session

ROOT = Path(__file__).resolve().parents[1]
# The Procfile's `web` before [2.3]: a stream held one of 2 × 8 threads.
OLD_WEB = (
    "gunicorn --bind 0.0.0.0:${PORT:-8000} --workers 2 --threads 8"
    ' --access-logfile - "web.app:create_app()"'
)
BATCH = 50  # stream requests in flight at once while opening
OPEN_TIMEOUT_S = 60.0
IDLE_S = 10.0  # how long the server's CPU is measured with the streams open and idle


def procfile_web() -> str:
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.startswith("web:"):
            return line.split(":", 1)[1].strip()
    raise SystemExit("Procfile: no `web` line")


def command_of(line: str, port: int) -> list[str]:
    """The Procfile line's words, $PORT expanded as the shell would, gunicorn from the venv."""
    words = [w.replace("${PORT:-8000}", str(port)) for w in shlex.split(line)]
    return [str(BIN / words[0]), *words[1:]]


@dataclass
class Tenant:
    key: str
    sessions: list[uuid.UUID]


def make_tenants(env: BenchEnv, orgs: int, per_org: int) -> list[Tenant]:
    tenants = []
    with env.uow() as uow:
        for n in range(orgs):
            key = create_api_key(uow=uow, org_name=f"bench-streams-{n}-{uuid.uuid4().hex[:6]}")
            org_id = org_for_key(uow=uow, key=key)
            assert org_id is not None
            sessions = [
                create_session(
                    uow=uow, org_id=org_id, agent_id="bench", user_id=f"viewer-{i}"
                ).session.id
                for i in range(per_org)
            ]
            tenants.append(Tenant(key, sessions))
        uow.commit()
    return tenants


@dataclass
class Opened:
    """What the server answered to each stream request, and the streams it admitted."""

    answers: Counter[str] = field(default_factory=Counter)
    streams: list[socket.socket] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def admitted(self) -> int:
        return self.answers["200"]


def _request(port: int, tenant: Tenant, session_id: uuid.UUID) -> bytes:
    return (
        f"GET /agents-api/sessions/{session_id}/events HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {tenant.key}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


def _verdict(data: bytes) -> str | None:
    """ "200" once the `ready` event came, "429 <code>" once a refusal's body came, else None."""
    head, separator, body = data.partition(b"\r\n\r\n")
    if not separator:
        return None
    status = head.split(b" ", 2)[1].decode()
    if status == "200":
        return "200" if b"event: ready" in body else None
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        None,
    )
    if length is None or len(body) < length:
        return None
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return f"{status} {json.loads(body[:length])['error']['code']}"
    return status


def _received(
    selector: selectors.BaseSelector, *, timeout: float
) -> Iterator[tuple[socket.socket, bytes]]:
    """(socket, what it sent) for each readable socket; b"" for one the server closed."""
    for key, _ in selector.select(timeout=timeout):
        sock = key.fileobj
        assert isinstance(sock, socket.socket)
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        yield sock, chunk


def open_streams(port: int, tenants: list[Tenant], count: int) -> Opened:
    """`count` stream requests, BATCH in flight at a time; admitted sockets stay open."""
    # Org after org, as viewers of many orgs arrive.
    per_org = len(tenants[0].sessions)
    wanted = [(t, t.sessions[i]) for i in range(per_org) for t in tenants][:count]
    opened = Opened()
    selector = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytes] = {}
    began = time.monotonic()
    deadline = began + OPEN_TIMEOUT_S
    pending = iter(wanted)
    in_flight = 0

    def start_one() -> bool:
        nonlocal in_flight
        item = next(pending, None)
        if item is None:
            return False
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        client.sendall(_request(port, *item))
        client.setblocking(False)
        buffers[client] = b""
        selector.register(client, selectors.EVENT_READ)
        in_flight += 1
        return True

    while in_flight < BATCH and start_one():
        pass
    while in_flight:
        if time.monotonic() > deadline:
            opened.answers["no answer"] += in_flight
            break
        for client, chunk in _received(selector, timeout=1.0):
            buffers[client] += chunk
            verdict = _verdict(buffers[client]) if chunk else "closed"
            if verdict is None:
                continue
            selector.unregister(client)
            del buffers[client]
            in_flight -= 1
            opened.answers[verdict] += 1
            if verdict == "200":
                opened.streams.append(client)
            else:
                client.close()
            start_one()
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    selector.close()
    opened.seconds = time.monotonic() - began
    return opened


@contextlib.contextmanager
def _in_background(work: Callable[[threading.Event], None], name: str) -> Iterator[None]:
    """`work(stop)` in a thread of its own for the block; `stop` is set when it ends."""
    stop = threading.Event()
    thread = threading.Thread(target=work, args=(stop,), name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


@contextlib.contextmanager
def draining(streams: list[socket.socket]) -> Iterator[Counter[str]]:
    """One thread reads (and drops) the open streams' pings; counts streams the server closed."""
    selector = selectors.DefaultSelector()
    for stream in streams:
        selector.register(stream, selectors.EVENT_READ)
    seen: Counter[str] = Counter()

    def drain(stop: threading.Event) -> None:
        while not stop.is_set() and selector.get_map():
            for stream, chunk in _received(selector, timeout=0.5):
                if chunk:
                    seen["pings"] += chunk.count(b": ping")
                else:
                    seen["closed by the server"] += 1
                    selector.unregister(stream)

    with _in_background(drain, "drain"):
        yield seen
    selector.close()


@dataclass(frozen=True)
class ServerShape:
    rss_mib: float
    streams_per_worker: list[int]
    subscribers: int


def server_shape(master_pid: int, port: int, client: redis.Redis) -> ServerShape:
    master = psutil.Process(master_pid)
    workers = master.children()
    rss = sum(p.memory_info().rss for p in [master, *workers]) / 2**20
    per_worker = sorted(
        (
            sum(
                1
                for c in worker.net_connections(kind="tcp")
                if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
            )
            for worker in workers
        ),
        reverse=True,
    )
    # Pub/sub is server-wide: count only the clients on this bench's Redis database.
    db = str(client.connection_pool.connection_kwargs.get("db", 0))
    subscribers = sum(
        1
        for c in client.client_list()
        if str(c.get("db")) == db and (int(c.get("psub", 0)) or int(c.get("sub", 0)))
    )
    return ServerShape(rss, per_worker, subscribers)


@contextlib.contextmanager
def probing(port: int, every_s: float = 0.02) -> Iterator[list[float]]:
    """One client sends GET /healthz every `every_s` meanwhile; its latencies (ms)."""
    latencies: list[float] = []

    def probe(stop: threading.Event) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            while not stop.wait(every_s):
                began = time.perf_counter()
                try:
                    healthz(connection, 0)
                except STALE:  # gunicorn closed the idle keep-alive connection
                    connection.close()
                    healthz(connection, 0)
                latencies.append((time.perf_counter() - began) * 1000)
        finally:
            connection.close()

    with _in_background(probe, "probe"):
        yield latencies


@dataclass(frozen=True)
class Run:
    name: str
    command: list[str]
    opened: Opened
    shape: ServerShape
    health: Phase
    messages: Phase
    probed_ms: list[float]  # /healthz while the messages were posted
    closed_during: int
    idle_cpu: float  # cores the server used with the streams open and no requests
    cpu_ms_per_post: float  # server CPU per message post (the probe's requests included)


def run_command(
    name: str, line: str, env: BenchEnv, tenants: list[Tenant], posters: list[uuid.UUID],
    args: argparse.Namespace,
) -> Run:  # fmt: skip
    streams, clients, requests = args.streams, args.clients, args.requests
    env.flush_redis()  # no leases left from the previous command
    port = free_port()
    command = command_of(line, port)
    with subprocess_running(command, env.process_environment()) as server:
        wait_until(lambda: server_answers(port), timeout_s=60, what=name, process=server)
        opened = open_streams(port, tenants, streams)
        try:
            with draining(opened.streams) as seen:
                time.sleep(1.0)  # the server settles (log lines, first pings)
                shape = server_shape(server.process.pid, port, env.redis)
                cpu, idle_began = cpu_seconds(server.process.pid), time.monotonic()
                time.sleep(IDLE_S)
                idle_cpu = (cpu_seconds(server.process.pid) - cpu) / (time.monotonic() - idle_began)
                health = run_phase(
                    "GET /healthz", server, port, [healthz] * clients, per_client=requests,
                    warmup=10,
                )  # fmt: skip
                with probing(port) as probed:
                    messages = run_phase(
                        "POST …/messages", server, port,
                        [post_message(env.org_key, s) for s in posters[:clients]],
                        per_client=requests, warmup=10,
                    )  # fmt: skip
                cpu_ms_per_post = messages.cpu_ms_per_request  # the probes' share included
                server.check_alive(name)
        finally:
            for stream in opened.streams:
                stream.close()
    closed = seen["closed by the server"]
    return Run(
        name, command, opened, shape, health, messages, probed, closed, idle_cpu, cpu_ms_per_post
    )


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--orgs", type=int, default=50)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=100, help="per client and route")
    parser.add_argument("--skip-old", action="store_true", help="only the Procfile's command")
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    per_org = -(-args.streams // args.orgs)
    tenants = make_tenants(env, args.orgs, per_org)
    posters = make_sessions(env, args.clients)
    commands = [("new (Procfile)", procfile_web())]
    if not args.skip_old:
        commands.append(("old (threads)", OLD_WEB))
    runs = [run_command(name, line, env, tenants, posters, args) for name, line in commands]

    print(
        f"bench/streams: {args.streams} GET …/events from {args.orgs} orgs"
        f" ({per_org} each, DRIFTLESS_MAX_STREAMS_PER_ORG=20 as shipped) held open, then"
        f" {args.clients} keep-alive clients x {args.requests} requests per route"
    )
    print(f"  machine: {host} (clients and server share it)")
    for run in runs:
        print(f"  {run.name}: {shlex.join(run.command[1:])}")
    header = (
        f"  {'command':<15} {'admitted':>8} {'refused':>8} {'open s':>7} {'RSS MiB':>8}"
        f" {'per worker':>11} {'subs':>5} {'healthz/s':>10} {'p50 ms':>7} {'p99 ms':>7}"
        f" {'posts/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'probe p50':>9} {'p99':>7}"
        f" {'idle cores':>10} {'CPU ms/post':>11}"
    )
    print(header)
    for run in runs:
        refused = sum(n for answer, n in run.opened.answers.items() if answer != "200")
        print(
            f"  {run.name:<15} {run.opened.admitted:>8} {refused:>8}"
            f" {run.opened.seconds:>7.1f} {run.shape.rss_mib:>8.0f}"
            f" {'/'.join(map(str, run.shape.streams_per_worker)):>11} {run.shape.subscribers:>5}"
            f" {run.health.rps:>10.1f} {run.health.p(0.5):>7.2f} {run.health.p(0.99):>7.2f}"
            f" {run.messages.rps:>8.1f} {run.messages.p(0.5):>7.2f} {run.messages.p(0.99):>7.2f}"
            f" {percentile(run.probed_ms, 0.5):>9.2f} {percentile(run.probed_ms, 0.99):>7.2f}"
            f" {run.idle_cpu:>10.3f} {run.cpu_ms_per_post:>11.2f}"
        )
    for run in runs:
        answers = ", ".join(f"{n} × {answer}" for answer, n in run.opened.answers.most_common())
        print(
            f"  {run.name}: answers {answers}; streams the server closed during the run:"
            f" {run.closed_during}"
        )
    fields = []
    for run in runs:
        tag = "new" if run.name.startswith("new") else "old"
        fields += [
            f"{tag}_admitted={run.opened.admitted}",
            f"{tag}_healthz_p50_ms={run.health.p(0.5):.2f}",
            f"{tag}_healthz_p99_ms={run.health.p(0.99):.2f}",
            f"{tag}_healthz_rps={run.health.rps:.1f}",
            f"{tag}_posts_rps={run.messages.rps:.1f}",
            f"{tag}_posts_p99_ms={run.messages.p(0.99):.2f}",
            f"{tag}_probe_p50_ms={percentile(run.probed_ms, 0.5):.2f}",
            f"{tag}_probe_p99_ms={percentile(run.probed_ms, 0.99):.2f}",
            f"{tag}_rss_mib={run.shape.rss_mib:.0f}",
            f"{tag}_idle_cores={run.idle_cpu:.3f}",
            f"{tag}_cpu_ms_per_post={run.cpu_ms_per_post:.2f}",
            f"{tag}_subscribers={run.shape.subscribers}",
        ]
    print(
        f"streams streams={args.streams} orgs={args.orgs} clients={args.clients} "
        + " ".join(fields)
    )


if __name__ == "__main__":
    main()
