"""bench/import_speed: `driftless import` of an export of 50,000 messages, timed.

The file is written in the export format by the format's own line models (the import
tests' export_file: each session a promoted, summarized closed topic and an active one,
a fork, notes and a curation move; facts with their history), then imported by the CLI
as an operator runs it (a subprocess, the whole of it timed: start-up included) into a
fresh org, then imported again (every session found and skipped: what a retry costs).
The command's start-up is timed apart (the header alone): the messages/s of the first
run without it is the number the issue asks to stay above 20,000.

With `--via web` the file is posted instead, streamed, to `POST /agents-api/import` of
the Procfile's web (gunicorn, gevent; started before the clock), as an agent platform
sends it: there the connections are green and psycopg2 has no COPY, so the messages are
inserted (shared/portability/restore.py).

    .venv/bin/python -m bench.import_speed [--sessions 10] [--messages 5000] [--via web]

The last line is machine-readable (`key=value` pairs).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import text

from bench.common import BIN, BenchEnv, arguments, bench_env, machine
from bench.http_throughput import web_server
from tests.integration.portability.export_file import body, export_lines


def run_import(env: BenchEnv, path: Path, org: str) -> tuple[float, dict[str, int]]:
    """Seconds `driftless import` took, and what it says it imported."""
    began = time.perf_counter()
    done = subprocess.run(
        [str(BIN / "driftless"), "import", str(path), "--org", org],
        env=env.process_environment(),
        capture_output=True,
        check=False,
    )
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"driftless import failed: {done.stderr.decode()[-2000:]}")
    imported: dict[str, int] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return seconds, imported


def post_import(port: int, key: str, path: Path) -> tuple[float, dict[str, int]]:
    """Seconds POST /agents-api/import of the file took, and what it says it imported."""
    began = time.perf_counter()
    with path.open("rb") as stream:
        answer = httpx.post(
            f"http://127.0.0.1:{port}/agents-api/import", content=stream, timeout=600,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"},
        )  # fmt: skip
    seconds = time.perf_counter() - began
    if answer.status_code != 200:
        raise SystemExit(f"POST /agents-api/import: {answer.status_code} {answer.text[:2000]}")
    imported: dict[str, int] = answer.json()["imported"]
    return seconds, imported


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--messages", type=int, default=5_000, help="messages per session")
    parser.add_argument("--via", choices=["cli", "web"], default="cli")
    args = parser.parse_args()
    host = machine()
    env = bench_env(args.admin_database_url)
    with env.uow() as uow:
        org = uow.session.scalars(text("SELECT name FROM orgs")).one()
    total = args.sessions * args.messages
    with tempfile.TemporaryDirectory(prefix="driftless-bench-import-") as directory:
        path = Path(directory) / "export.ndjson"
        path.write_bytes(body(export_lines(sessions=args.sessions, messages=args.messages)))
        size_mb = path.stat().st_size / 2**20
        empty = Path(directory) / "empty.ndjson"
        empty.write_bytes(body(export_lines(sessions=0)[:1]))  # the header alone
        if args.via == "web":
            with web_server(env, "procfile") as (port, _):
                startup_s, _ = post_import(port, env.org_key, empty)
                first_s, first = post_import(port, env.org_key, path)
                again_s, again = post_import(port, env.org_key, path)
        else:
            startup_s, _ = run_import(env, empty, org)
            first_s, first = run_import(env, path, org)
            again_s, again = run_import(env, path, org)
    if first["messages"] != total or again["messages"] != 0:
        raise SystemExit(f"imported {first} then {again}; expected {total} messages, then 0")
    with env.uow() as uow:
        stored = uow.session.scalar(text("SELECT count(*) FROM messages"))
    if stored != total:
        raise SystemExit(f"{stored} messages stored, {total} expected")
    rate = total / first_s
    # The command's own start-up (imports, settings, the connection) is the same for one
    # line as for millions: the header-only import's time, taken off for the import's rate.
    import_rate = total / (first_s - startup_s)
    print(
        f"bench/import_speed: {args.sessions} sessions x {args.messages} messages"
        f" ({size_mb:.1f} MiB NDJSON) by the {args.via}; machine: {host}"
    )
    print(f"  start-up      {startup_s:6.2f} s  the header alone")
    print(f"  first import  {first_s:6.2f} s  {rate:9,.0f} messages/s (start-up included)")
    print(f"                {first_s - startup_s:6.2f} s  {import_rate:9,.0f} messages/s importing")
    print(f"  again         {again_s:6.2f} s  every session skipped, nothing written")
    print(
        f"messages={total} startup_s={startup_s:.2f} first_s={first_s:.2f}"
        f" messages_per_s={rate:.0f} importing_messages_per_s={import_rate:.0f}"
        f" again_s={again_s:.2f} size_mib={size_mb:.1f}"
    )


if __name__ == "__main__":
    main()
