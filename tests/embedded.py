"""The embedded servers' processes as a test sees them: by the pids their own files name."""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil

STOP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class EmbeddedServers:
    """The embedded servers' processes under a home, by the pids their own files name."""

    processes: tuple[psutil.Process, ...]

    @classmethod
    def of(cls, home: Path) -> EmbeddedServers:
        found = []
        for pidfile in (home / "postgres" / "postmaster.pid", home / "redis" / "redis.pid"):
            with contextlib.suppress(FileNotFoundError, IndexError, ValueError, psutil.Error):
                found.append(psutil.Process(int(pidfile.read_text().splitlines()[0])))
        return cls(tuple(found))

    def running(self) -> list[str]:
        """Those still running (a zombie is not: it holds nothing)."""
        alive = []
        for process in self.processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(" ".join(process.cmdline()))
        return alive

    def stop(self) -> None:
        """After a failed test: leave none of them for the next one. SIGINT is
        PostgreSQL's fast shutdown (its backends go with it) and a stop for Redis."""
        for process in self.processes:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGINT)
                process.wait(timeout=STOP_TIMEOUT_S)
