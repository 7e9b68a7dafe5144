"""`driftless up` on the embedded servers, as `make run` on a fresh clone: a process stops
only the servers it owns, so `driftless demo` beside a running system leaves it running,
and Ctrl-C stops every server `up` owns, even after an earlier run was killed."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.up import (
    DRIFTLESS,
    STOPPED_WITHIN_S,
    embedded_environment,
    stop_up,
)
from tests.embedded import EmbeddedServers
from tests.faults.procs import free_port
from tests.helpers import wait_for

DEMO_TIMEOUT_S = 240  # its own `up`, two sessions and their summaries


class Up:
    """One `driftless up` on the embedded servers of `home`, its output kept in files."""

    def __init__(self, home: Path, name: str) -> None:
        self.port = free_port()
        self.stdout, self.stderr = home.parent / f"{name}.out", home.parent / f"{name}.err"
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.process = subprocess.Popen(
                [DRIFTLESS, "up"], env=embedded_environment(home=home, port=self.port),
                stdout=out, stderr=err,
            )  # fmt: skip

    def wait_up(self) -> None:
        def up() -> bool:
            assert self.process.poll() is None, self.stderr.read_text()[-3000:]
            return "driftless is up" in self.stdout.read_text()

        wait_for(up, timeout=120, what="driftless up")

    def ready(self) -> dict[str, object]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as ok:
            body: dict[str, object] = json.loads(ok.read())
            return body

    def ctrl_c(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=STOPPED_WITHIN_S)

    def killed_groups(self) -> str:
        return "\n".join(
            line for line in self.stderr.read_text().splitlines() if "did not stop" in line
        )


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """The embedded servers' home; whatever a failed test left running is stopped."""
    home = tmp_path / "home"
    yield home
    EmbeddedServers.of(home).stop()


def test_demo_beside_a_running_system_leaves_it_running_43(home: Path) -> None:
    system = Up(home, "system")
    try:
        system.wait_up()
        servers = EmbeddedServers.of(home)

        demo = subprocess.run(
            [DRIFTLESS, "demo"], env=embedded_environment(home=home, port=free_port()),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S,
        )  # fmt: skip
        assert demo.returncode == 0, demo.stderr[-3000:]
        assert "Session 2: what the agent remembers" in demo.stdout

        # The demo's own `up` joined the system's servers and left them to it.
        assert system.ready()["status"] == "ok"
        assert len(servers.running()) == 2
        # The system stops on Ctrl-C alone, nothing killed, and its servers with it.
        assert system.ctrl_c() == 0, system.stderr.read_text()[-3000:]
        assert system.killed_groups() == ""
        assert servers.running() == []
    finally:
        stop_up(system.process, signal.SIGINT)


def test_ctrl_c_stops_the_embedded_servers_even_after_a_killed_run_43(home: Path) -> None:
    # A run that needed a kill (kill -9 of its whole tree) left its servers running.
    first = Up(home, "first")
    try:
        first.wait_up()
        supervisor = psutil.Process(first.process.pid)
        tree = [supervisor, *supervisor.children(recursive=True)]
        for process in tree:
            process.kill()
        psutil.wait_procs(tree, timeout=STOPPED_WITHIN_S)
    finally:
        stop_up(first.process, signal.SIGINT)
    servers = EmbeddedServers.of(home)
    assert len(servers.running()) == 2

    second = Up(home, "second")
    try:
        second.wait_up()
        assert second.ready()["status"] == "ok"
        assert second.ctrl_c() == 0, second.stderr.read_text()[-3000:]
        assert servers.running() == []  # PostgreSQL too: it used to outlive every later run
    finally:
        stop_up(second.process, signal.SIGINT)
