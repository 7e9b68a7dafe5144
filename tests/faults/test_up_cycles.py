"""Ctrl-C on `driftless up` stops its whole process tree, every time, and frees its port.

Each cycle starts `driftless up` in a session of its own and sends SIGINT to its process
group, as a terminal does on Ctrl-C. A process left over from one cycle (it used to be a
gunicorn worker, in 1 cycle of 5) fails the cycle and would hold the port of the next.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.faults.conftest import report
from tests.faults.procs import BIN, ROOT, PrivateRedis, driftless_env, free_port, wait_until
from worker.supervisor import KILL_WAIT_S, STOP_GRACE_S, ProcessGroup, stop_groups

CYCLES = 10
START_TIMEOUT_S = 60.0


def healthz_status(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status
    finally:
        connection.close()


def port_free(port: int) -> bool:
    """Whether a server can listen on the port now (SO_REUSEADDR, as gunicorn binds)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError:
            return False
    return True


def sessions_of(tree: list[psutil.Process]) -> set[int]:
    found = set()
    for process in tree:
        with contextlib.suppress(ProcessLookupError):
            found.add(os.getsid(process.pid))
    return found - {os.getsid(0)}


def left_over(tree: list[psutil.Process], sessions: set[int]) -> list[str]:
    """Live processes of the recorded tree or of its sessions (forked after the record).

    Zombies do not count: they hold no port, and an init may reap them late.
    """
    suspects = {process.pid: process for process in tree}
    for process in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError):
            if os.getsid(process.pid) in sessions:
                suspects.setdefault(process.pid, process)
    left = []
    for process in suspects.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{process.pid} {process.status()} {' '.join(process.cmdline())}")
    return left


def kill_sessions(sessions: set[int]) -> None:
    """After a failed cycle: leave nothing behind for the next test (leaders lead groups)."""
    for session in sessions:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(session, signal.SIGKILL)


@dataclass
class Cycle:
    start_s: float
    stop_s: float
    killed: int  # groups the supervisor had to SIGKILL


def ctrl_c_cycle(name: str, env: dict[str, str], port: int, logs: Path) -> Cycle:
    """Start `up`, wait for "is up", Ctrl-C, and check that nothing of it is left."""
    out, err = logs / f"{name}.out", logs / f"{name}.err"
    began = time.monotonic()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        up = subprocess.Popen(
            [str(BIN / "driftless"), "up"], env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=stdout, stderr=stderr, start_new_session=True,
        )  # fmt: skip
    sessions: set[int] = {up.pid}
    passed = False
    try:

        def is_up() -> bool:
            assert up.poll() is None, f"{name}: up exited:\n{err.read_text()[-3000:]}"
            return "driftless is up" in out.read_text()

        wait_until(is_up, timeout=START_TIMEOUT_S, what=f"{name}: is up", interval=0.1)
        start_s = time.monotonic() - began
        assert healthz_status(port) == 200  # "is up" means the web answers already
        supervisor = psutil.Process(up.pid)
        tree = [supervisor, *supervisor.children(recursive=True)]
        sessions |= sessions_of(tree)

        stopping = time.monotonic()
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C: to the terminal's foreground group
        assert up.wait(timeout=STOP_GRACE_S + KILL_WAIT_S + 10) == 0, err.read_text()
        stop_s = time.monotonic() - stopping

        assert left_over(tree, sessions) == [], name
        assert port_free(port), f"{name}: port {port} still taken"
        passed = True
        return Cycle(start_s, stop_s, err.read_text().count("did not stop within"))
    finally:
        if not passed:
            if up.poll() is None:
                up.kill()
                up.wait()
            kill_sessions(sessions)


@pytest.mark.faults
def test_up_stops_its_whole_tree_every_time(
    private_redis: PrivateRedis, fresh_database: str, tmp_path: Path
) -> None:
    port = free_port()  # the same port every cycle: a leftover would hold the next one's
    env = driftless_env(
        DATABASE_URL=fresh_database,
        REDIS_URL=private_redis.url,
        CELERY_BROKER_URL=private_redis.url,
        PORT=str(port),
        DRIFTLESS_HOME=str(tmp_path / "home"),
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cycles = [ctrl_c_cycle(f"cycle-{i}", env, port, tmp_path) for i in range(CYCLES)]
    starts = [cycle.start_s for cycle in cycles]
    stops = [cycle.stop_s for cycle in cycles]
    report(
        f"up: {CYCLES} Ctrl-C cycles, no process left, port free each time; "
        f"up in {min(starts):.1f}-{max(starts):.1f} s, stopped in "
        f"{min(stops):.1f}-{max(stops):.1f} s, {sum(c.killed for c in cycles)} groups SIGKILLed"
    )


STUBBORN = """
import os, signal, sys, time
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as the deadlocked gunicorn worker did
    time.sleep(600)
else:
    with open(sys.argv[1], "w") as out:
        out.write(str(child))
    time.sleep(600)  # SIGTERM ends the leader and orphans its child
"""


@pytest.mark.faults
def test_a_member_ignoring_sigterm_is_killed_after_the_grace_even_if_its_leader_is_gone(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "grandchild"
    stubborn = ProcessGroup.start("stubborn", [sys.executable, "-c", STUBBORN, str(pid_file)], {})
    polite = ProcessGroup.start("polite", ["sleep", "600"], {})
    try:
        wait_until(pid_file.exists, timeout=10, what="the leader to fork")
        wait_until(pid_file.read_text, timeout=10, what="the grandchild's pid")
        grandchild = psutil.Process(int(pid_file.read_text()))

        began = time.monotonic()
        assert stop_groups([stubborn, polite], grace_s=1.0) == ["stubborn"]
        assert 1.0 <= time.monotonic() - began < 1.0 + KILL_WAIT_S + 2

        assert stubborn.exited() == -signal.SIGTERM  # the leader went at once
        assert not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE
        assert polite.exited() == -signal.SIGTERM
    finally:
        kill_sessions({stubborn.process.pid, polite.process.pid})
