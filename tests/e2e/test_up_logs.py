"""What `driftless up` (`make run`) prints: text from the first line on, nothing while idle,
so the banner with the URL and the dev key stays in sight, and one line per request."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import wait_for
from worker.supervisor import KILL_WAIT_S, STOP_GRACE_S

IDLE_S = 5.0  # the re-evaluation pump alone used to log 3 lines a second


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Up:
    port: int
    output: Path  # stdout and stderr of the whole tree, as a terminal shows them

    def lines(self) -> list[str]:
        return self.output.read_text(errors="replace").splitlines()


@pytest.fixture
def up(database_url: str, redis_url: str, tmp_path: Path) -> Iterator[Up]:
    """`driftless up` as `make run` starts it: LOG_FORMAT unset."""
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "PORT": str(port),
        "DRIFTLESS_HOME": str(tmp_path),
        "DRIFTLESS_WORKER_METRICS_PORT": "0",  # 9808 may be a running system's
    }
    # The broker is REDIS_URL's database, as under `make run`: never the session worker's.
    for name in ("CELERY_BROKER_URL", "LOG_FORMAT", "LOG_LEVEL", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)
    output = tmp_path / "terminal.log"
    with output.open("wb") as terminal:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "driftless"), "up"],
            env=env, stdout=terminal, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield Up(port, output)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=STOP_GRACE_S + KILL_WAIT_S + 10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        print(output.read_text(errors="replace"))  # shown when the test failed


def _is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def test_up_prints_text_stays_quiet_when_idle_and_logs_each_request(up: Up) -> None:
    def started() -> bool:
        text = "\n".join(up.lines())
        # The banner's last line is the key; the worker and beat may come up after the web.
        return (
            "dl_" in text and "celery@" in text and " ready." in text and "beat: Starting" in text
        )

    wait_for(started, timeout=90, what="driftless up, its worker and beat")
    key = next(line for line in up.lines() if line.startswith("dl_"))
    time.sleep(1.0)  # the last start-up lines (the second web process)

    before = len(up.lines())
    time.sleep(IDLE_S)
    idle = up.lines()[before:]
    # A late start-up line or two (a web process, the worker's pidbox) may land here.
    assert len(idle) <= 3 and not [line for line in idle if "advance_reevaluations" in line]

    request = urllib.request.Request(
        f"http://127.0.0.1:{up.port}/agents-api/sessions?agentId=a&userId=u",
        headers={"Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200

    def access_lines() -> list[str]:
        return [line for line in up.lines()[before:] if " web.access: " in line]

    wait_for(access_lines, timeout=10, what="the access line")
    time.sleep(0.5)  # a second line would have come by now
    [line] = access_lines()
    assert " INFO web.access: GET /agents-api/sessions?agentId&userId 200 " in line
    assert key not in line

    lines = up.lines()
    assert not [line for line in lines if _is_json(line)]
    assert any(f"http://127.0.0.1:{up.port}" in line for line in lines)
