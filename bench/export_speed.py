"""bench/export_speed: GET /agents-api/export of a large scope, its speed and the web's memory.

Fills one scope (`--sessions` sessions of `--messages` messages in all, posted in
batches of 1,000 through the API, plus a few facts), starts the Procfile's web, exports
a small scope once (so the modules and pools the export uses are loaded), then streams
the large scope's export and reads it in 64 KiB chunks. The resident memory (RSS) of
the web's processes (gunicorn and its workers, summed, psutil) is read before, and
every 20 ms while it streams `--rounds` exports one after another: the growth is the
peak less the before. Messages/s counts an export's message lines over the time from
the request to its last byte: the median of the rounds, and the best.

    .venv/bin/python -m bench.export_speed [--messages 50000] [--sessions 50]
        [--rounds 3] [--server procfile|gthread]

The last line is machine-readable (`key=value` pairs).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import statistics
import threading
import time

import psutil

from bench.common import BenchEnv, arguments, bench_env, machine
from bench.http_throughput import CONTENT, SERVERS, web_server
from shared.facts.service import merge_facts
from shared.memory.scope import Scope
from shared.sessions.service import create_session

AGENT, USER = "bench-export", "big-user"
BATCH = 1_000  # MAX_BATCH_MESSAGES
CHUNK = 64 * 1024
SAMPLE_S = 0.02
MIB = 1024 * 1024


def fill(env: BenchEnv, port: int, *, sessions: int, messages: int) -> None:
    """`sessions` sessions of the scope holding `messages` messages in all, and 20 facts."""
    org_id = env.org_id()
    with env.uow() as uow:
        ids = [
            create_session(uow=uow, org_id=org_id, agent_id=AGENT, user_id=USER).session.id
            for _ in range(sessions)
        ]
        scope = Scope(org_id=org_id, agent_id=AGENT, user_id=USER)
        merge_facts(
            uow=uow, scope=scope, facts={f"k{i}": f"v{i}" for i in range(20)}, changed_by="user"
        )
        create_session(uow=uow, org_id=org_id, agent_id=AGENT, user_id="small-user")
        uow.commit()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {env.org_key}", "Content-Type": "application/json"}
    per_session = messages // sessions
    for session_id in ids:
        left = per_session
        while left:
            size = min(BATCH, left)
            batch = [
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {CONTENT}"}
                for i in range(size)
            ]
            body = json.dumps({"messages": batch})
            path = f"/agents-api/sessions/{session_id}/messages"
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            if response.status != 201:
                raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
            left -= size
    connection.close()


def web_rss(pid: int) -> int:
    """Resident bytes of the web: gunicorn's master and its workers."""
    parent = psutil.Process(pid)
    processes = [parent, *parent.children(recursive=True)]
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += process.memory_info().rss
    return total


def export(port: int, key: str, user: str) -> tuple[int, int, float]:
    """(message lines, bytes, seconds) of one export, read as it streams."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    connection.request(
        "GET",
        f"/agents-api/export?agentId={AGENT}&userId={user}",
        headers={"Authorization": f"Bearer {key}"},
    )
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    messages = size = 0
    pending = b""
    while chunk := response.read(CHUNK):
        size += len(chunk)
        # Whole lines only: a line cut by the chunk's end waits for the next chunk.
        whole, _, pending = (pending + chunk).rpartition(b"\n")
        messages += (b"\n" + whole).count(b'\n{"type":"message"')
    elapsed = time.perf_counter() - started
    connection.close()
    return messages, size, elapsed


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--server", choices=SERVERS, default="procfile")
    parser.add_argument(
        "--rounds", type=int, default=3, help="exports of the scope, one after another"
    )
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    with web_server(env, args.server) as (port, server):
        fill(env, port, sessions=args.sessions, messages=args.messages)
        pid = server.process.pid
        export(port, env.org_key, "small-user")  # warm: the modules the export loads
        before = web_rss(pid)
        peak = [before]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(SAMPLE_S):
                peak[0] = max(peak[0], web_rss(pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            runs = [export(port, env.org_key, USER) for _ in range(args.rounds)]
        finally:
            done.set()
            sampler.join()
        after = web_rss(pid)
    expected = args.messages // args.sessions * args.sessions
    if any(messages != expected for messages, _, _ in runs):
        raise SystemExit(f"an export held {[r[0] for r in runs]} messages, not {expected}")
    messages, size = runs[0][0], runs[0][1]
    rates = sorted(messages / elapsed for _, _, elapsed in runs)
    mps, best = statistics.median(rates), rates[-1]
    elapsed = messages / mps
    growth = (max(peak[0], after) - before) / MIB
    print(
        f"bench/export_speed: {args.sessions} sessions, {messages} messages"
        f" ({size / MIB:.1f} MiB of NDJSON), server {args.server}; machine: {host}"
    )
    print(
        f"  export (median of {args.rounds}): {elapsed:.2f} s, {mps:,.0f} messages/s,"
        f" {size / MIB / elapsed:.1f} MiB/s; best {best:,.0f} messages/s"
    )
    print(
        f"  web RSS: {before / MIB:.1f} MiB before, peak {peak[0] / MIB:.1f} MiB,"
        f" {after / MIB:.1f} MiB after: grew {growth:.1f} MiB"
    )
    print(
        f"export_speed server={args.server} sessions={args.sessions} messages={messages}"
        f" seconds={elapsed:.2f} messages_per_s={mps:.0f} best_per_s={best:.0f}"
        f" rss_growth_mib={growth:.1f}"
        f" bytes={size}"
    )


if __name__ == "__main__":
    main()
