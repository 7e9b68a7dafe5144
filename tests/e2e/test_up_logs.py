"""What `driftless up` (`make run`) prints: text from the first line on, nothing while idle,
so the banner with the URL and the dev key stays in sight, and one line per request."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.up import DRIFTLESS, stop_up, up_environment
from tests.faults.procs import free_port
from tests.helpers import wait_for

IDLE_S = 5.0  # the re-evaluation pump alone used to log 3 lines a second


@dataclass
class Up:
    port: int
    output: Path  # stdout and stderr of the whole tree, as a terminal shows them

    def lines(self) -> list[str]:
        return self.output.read_text(errors="replace").splitlines()


@pytest.fixture
def up(database_url: str, redis_url: str, tmp_path: Path) -> Iterator[Up]:
    """`driftless up` as `make run` starts it: LOG_FORMAT unset."""
    port = free_port()
    # The broker is REDIS_URL's database, as under `make run`: never the session worker's.
    env = up_environment(
        database_url=database_url, redis_url=redis_url, home=tmp_path, port=port, own_broker=False
    )
    output = tmp_path / "terminal.log"
    with output.open("wb") as terminal:
        process = subprocess.Popen(
            [DRIFTLESS, "up"],
            env=env, stdout=terminal, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield Up(port, output)
    finally:
        stop_up(process, signal.SIGINT)
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


def test_up_prints_no_celery_banner_nor_its_root_warning_43(up: Up) -> None:
    """Our own banner says where everything is; Celery's banners (its config, queues and
    tasks) and its warning about running as root (a container's `make run`) only pushed
    it out of sight."""

    def started() -> bool:
        text = "\n".join(up.lines())
        return "dl_" in text and " ready." in text and "beat: Starting" in text

    wait_for(started, timeout=90, what="driftless up, its worker and beat")
    text = "\n".join(up.lines())
    assert "SecurityWarning" not in text and "superuser privileges" not in text
    assert "[tasks]" not in text and "[queues]" not in text and "[config]" not in text
    assert "celery beat v" not in text and "Configuration ->" not in text
