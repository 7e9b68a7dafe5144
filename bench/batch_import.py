"""bench/batch_import: importing a history, one message per request against batches.

Each client (a thread with one keep-alive connection) imports into a session of its own:
first one message per `POST …/messages`, then `{messages: [...]}` batches of `--batch`.
Both run against the same server, one after the other; messages/s counts stored
messages (201s) over the time from the first request to the last answer.

    .venv/bin/python -m bench.batch_import [--clients 4] [--messages 10000] [--batch 500]
        [--server procfile|gthread]

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
    Request,
    make_sessions,
    post_message,
    run_phase,
    web_server,
)


def post_batch(key: str, session_id: uuid.UUID, size: int) -> Request:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    path = f"/agents-api/sessions/{session_id}/messages"

    def post(connection: http.client.HTTPConnection, number: int) -> None:
        messages = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"{number}.{i}: {CONTENT}"}
            for i in range(size)
        ]
        connection.request("POST", path, body=json.dumps({"messages": messages}), headers=headers)
        response = connection.getresponse()
        data = response.read()
        if response.status != 201 or len(json.loads(data)["messages"]) != size:
            raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")

    return post


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--messages", type=int, default=10_000, help="per way, all clients")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--server", choices=SERVERS, default="procfile")
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    each = args.messages // args.clients
    with web_server(env, args.server) as (port, server):
        singles = run_phase(
            "1 message per request", server, port,
            [post_message(env.org_key, s) for s in make_sessions(env, args.clients)],
            per_client=each, warmup=5,
        )  # fmt: skip
        batches = run_phase(
            f"batches of {args.batch}", server, port,
            [post_batch(env.org_key, s, args.batch) for s in make_sessions(env, args.clients)],
            per_client=max(1, each // args.batch), warmup=1,
        )  # fmt: skip
    single_mps = singles.rps
    batch_mps = batches.rps * args.batch
    print(
        f"bench/batch_import: {args.clients} clients, {args.messages} messages per way,"
        f" server {args.server}; machine: {host}"
    )
    print(f"  {'way':<22} {'messages/s':>11} {'requests':>9} {'p50 ms':>9} {'p99 ms':>9}")
    for phase, mps in ((singles, single_mps), (batches, batch_mps)):
        print(
            f"  {phase.name:<22} {mps:11.0f} {len(phase.latencies_ms):9d}"
            f" {phase.p(0.5):9.2f} {phase.p(0.99):9.2f}"
        )
    print(f"  {'batch ÷ single':<22} {batch_mps / single_mps:11.1f}")
    print(
        f"batch_import server={args.server} clients={args.clients} batch={args.batch}"
        f" single_mps={single_mps:.0f} batch_mps={batch_mps:.0f}"
        f" batch_p99_ms={batches.p(0.99):.2f} speedup={batch_mps / single_mps:.1f}"
    )


if __name__ == "__main__":
    main()
