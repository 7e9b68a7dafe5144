"""N message posts through the web app in this one process: what bench/post_instructions.py
counts the instructions of, under callgrind.

Run by file (`python -P bench/posts_in_process.py WARMUP N`) with any checkout's interpreter, so
that the checkout's own `web` and `shared` serve: it imports nothing of bench/ and only
what every checkout since [2.3] has (create_app, load_settings). The app is built from
the environment's settings as gunicorn builds it (the real engine, the real job queue on
the broker; traces on if the OTEL_* variables say so), and the posts are
bench/http_throughput.py's: one message each, alternating roles, in one session, with the
key in DRIFTLESS_BENCH_KEY.

Only the N posts after the WARMUP ones are counted: DRIFTLESS_BENCH_CALLGRIND_LIB names a
small library (bench/post_instructions.py builds it) whose `start` and `stop` are
callgrind's client requests, so the start-up's billions of instructions, which vary by
more than a few posts' worth, are neither counted nor slowed down.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

# bench/http_throughput.py's message: a couple of sentences.
CONTENT = (
    "Let's keep the billing service on PostgreSQL 16 with Celery on Redis for retries;"
    " invoices are in EUR and the migration deadline is March 3. Owner: Ada."
)


def post(client: Any, path: str, headers: dict[str, str], number: int) -> None:
    role = "user" if number % 2 == 0 else "assistant"
    answer = client.post(path, json={"role": role, "content": f"{number}: {CONTENT}"},
                         headers=headers)  # fmt: skip
    if answer.status_code != 201:
        raise SystemExit(f"POST {path}: HTTP {answer.status_code}: {answer.data[:300]!r}")


def main() -> None:
    from shared.infra.config import load_settings
    from web.app import create_app

    warmup, count = int(sys.argv[1]), int(sys.argv[2])
    counter = _callgrind()
    app = create_app(load_settings())
    client = app.test_client()
    headers = {"Authorization": f"Bearer {os.environ['DRIFTLESS_BENCH_KEY']}"}
    made = client.post("/agents-api/sessions", json={"agentId": "bench", "userId": "instr"},
                       headers=headers)  # fmt: skip
    if made.status_code != 201:
        raise SystemExit(f"POST /sessions: HTTP {made.status_code}: {made.data[:300]!r}")
    path = f"/agents-api/sessions/{made.get_json()['id']}/messages"
    for number in range(warmup):
        post(client, path, headers, number)
    _flush_traces()  # the warm-up's spans are not the measured posts'
    counter.start()
    for number in range(warmup, warmup + count):
        post(client, path, headers, number)
    _flush_traces()  # the measured posts' spans, exported in the measured span
    counter.stop()
    app.extensions["driftless"].close()


class _Nothing:
    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _callgrind() -> Any:
    """callgrind's start and stop of instrumentation (or no-ops when not under it)."""
    library = os.environ.get("DRIFTLESS_BENCH_CALLGRIND_LIB")
    return ctypes.CDLL(library) if library else _Nothing()


def _flush_traces() -> None:
    """Export what the batch processor still holds, so that every post's spans are counted
    (a checkout from before traces has no OpenTelemetry at all)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return
    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        flush()


if __name__ == "__main__":
    main()
