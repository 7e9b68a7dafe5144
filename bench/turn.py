"""bench/turn: an agent turn as three round trips against one (`?context=true`).

An agent turn stores the model's last answer and the user's new message, then reads the
context for the next model call. Before [2.3] that took three requests (POST assistant,
POST user, GET …/context); now one: `POST …/messages?context=true` with both messages as
a batch, answered with the context. Each client is a thread with one keep-alive
connection and a session of its own; both ways run against the same server, one after
the other, and a turn's time is from its first byte sent to its last byte read.

    .venv/bin/python -m bench.turn [--clients 32] [--turns 50] [--server procfile|gthread]

The last line is machine-readable (`key=value` pairs).
"""

from __future__ import annotations

import http.client
import json
import uuid

from bench.common import arguments, bench_env, machine
from bench.http_throughput import (
    CONTENT,
    SERVERS,
    Phase,
    Request,
    make_sessions,
    run_phase,
    web_server,
)


def _send(
    connection: http.client.HTTPConnection, method: str, path: str, headers: dict[str, str],
    body: object = None,
) -> None:  # fmt: skip
    payload = None if body is None else json.dumps(body)
    connection.request(method, path, body=payload, headers=headers)
    response = connection.getresponse()
    data = response.read()  # all of it, or the connection cannot be reused
    if response.status not in (200, 201):
        raise RuntimeError(f"{method} {path}: HTTP {response.status}: {data[:300]!r}")


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def three_trips(key: str, session_id: uuid.UUID) -> Request:
    headers, base = _headers(key), f"/agents-api/sessions/{session_id}"

    def turn(connection: http.client.HTTPConnection, number: int) -> None:
        answer = {"role": "assistant", "content": f"answer {number}: {CONTENT}"}
        question = {"role": "user", "content": f"question {number}: {CONTENT}"}
        _send(connection, "POST", f"{base}/messages", headers, answer)
        _send(connection, "POST", f"{base}/messages", headers, question)
        _send(connection, "GET", f"{base}/context", headers)

    return turn


def one_trip(key: str, session_id: uuid.UUID) -> Request:
    headers, path = _headers(key), f"/agents-api/sessions/{session_id}/messages?context=true"

    def turn(connection: http.client.HTTPConnection, number: int) -> None:
        answer = {"role": "assistant", "content": f"answer {number}: {CONTENT}"}
        question = {"role": "user", "content": f"question {number}: {CONTENT}"}
        _send(connection, "POST", path, headers, {"messages": [answer, question]})

    return turn


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--turns", type=int, default=50, help="per client and way")
    parser.add_argument("--warmup", type=int, default=5, help="turns per client and way")
    parser.add_argument("--server", choices=SERVERS, default="procfile")
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    phases: list[Phase] = []
    with web_server(env, args.server) as (port, server):
        for name, way in (("3 round trips", three_trips), ("1 round trip", one_trip)):
            sessions = make_sessions(env, args.clients)
            requests = [way(env.org_key, s) for s in sessions]
            phases.append(
                run_phase(name, server, port, requests, per_client=args.turns, warmup=args.warmup)
            )
    print(
        f"bench/turn: {args.clients} clients x {args.turns} turns (after {args.warmup} warm-up)"
        f" each way, server {args.server}; machine: {host}"
    )
    print(f"  {'turn':<16} {'turns/s':>9} {'p50 ms':>9} {'p99 ms':>9}")
    for phase in phases:
        print(f"  {phase.name:<16} {phase.rps:9.1f} {phase.p(0.5):9.2f} {phase.p(0.99):9.2f}")
    old, new = phases
    speedup = new.rps / old.rps
    print(f"  {'1 trip ÷ 3 trips':<16} {speedup:9.2f} {new.p(0.5) / old.p(0.5):9.2f}")
    print(
        f"turn server={args.server} clients={args.clients} three_trips_tps={old.rps:.1f}"
        f" three_trips_p50_ms={old.p(0.5):.2f} three_trips_p99_ms={old.p(0.99):.2f}"
        f" one_trip_tps={new.rps:.1f} one_trip_p50_ms={new.p(0.5):.2f}"
        f" one_trip_p99_ms={new.p(0.99):.2f} speedup={speedup:.2f}"
    )


if __name__ == "__main__":
    main()
