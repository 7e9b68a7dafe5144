"""`driftless mcp --transport http` logs as every other process does: with LOG_FORMAT=json
each line it writes is one JSON object, uvicorn's start-up and access lines included (they
were uvicorn's own text, mixed in with the JSON lines)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from tests.e2e.up import DRIFTLESS
from tests.faults.procs import free_port
from tests.helpers import wait_for


def _status(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/mcp", timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def test_mcp_over_http_writes_json_lines_only_43(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url,
           "LOG_FORMAT": "json", "DRIFTLESS_HOME": str(tmp_path)}  # fmt: skip
    log = tmp_path / "mcp.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [DRIFTLESS, "mcp", "--transport", "http", "--port", str(port)],
            env=env, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        assert wait_for(lambda: _status(port), timeout=60) == 401  # no key: refused, logged
        wait_for(lambda: "/mcp" in log.read_text(errors="replace"), timeout=10)
    finally:
        process.terminate()
        process.wait(timeout=30)
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    assert any("/mcp" in line for line in lines)  # the access line is there
    not_json = [line for line in lines if not _is_json_object(line)]
    assert not_json == [], not_json


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
