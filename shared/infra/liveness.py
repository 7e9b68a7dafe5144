"""A worker process's heartbeat in Redis: the jobs it marks running (shared/infra/held.py)
count as held only while it beats, so a job of a worker killed with `kill -9` is known
lost within one heartbeat's lifetime, not after the task's time limit.

One key a process, refreshed every third of its lifetime by a daemon thread (a greenlet
under gevent's patching):
  driftless:alive:<host>:<pid>:<random>
The beat starts on the first use in a process, and again in a forked child (prefork),
whose pid differs: the parent's thread is not inherited by the child.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

import redis

log = logging.getLogger(__name__)

ALIVE_PREFIX = "driftless:alive:"
# The longest a heartbeat lives: a killed worker's jobs are back within the reconcile
# period plus this, and a period is what the reconciler's own grace already waits.
MAX_TTL_S = 30.0
MIN_TTL_S = 1.0


def alive_key(runner: str) -> str:
    return ALIVE_PREFIX + runner


def heartbeat_ttl_s(reconcile_s: float) -> float:
    """A heartbeat no longer than a reconcile period, so that a killed worker's job is
    sent again within two periods (one for the heartbeat to lapse, one to the next run)."""
    return max(MIN_TTL_S, min(MAX_TTL_S, float(reconcile_s)))


class Heartbeat:
    """This process's name as a runner of jobs, alive in Redis while it runs."""

    def __init__(self, client: Callable[[], redis.Redis], *, ttl_s: float) -> None:
        self._client = client
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._every_s = ttl_s / 3
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._runner = ""

    def runner(self) -> str:
        """This process's name, beating from the first call on (the first beat is sent
        before it returns, so a job marked with it is held from the start)."""
        if self._pid == os.getpid():
            return self._runner
        with self._lock:
            if self._pid != os.getpid():
                runner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
                self._beat_once(runner)
                threading.Thread(
                    target=self._beat, args=(runner,), name="driftless-heartbeat", daemon=True
                ).start()
                self._runner, self._pid = runner, os.getpid()
        return self._runner

    def _beat(self, runner: str) -> None:
        while True:
            time.sleep(self._every_s)
            self._beat_once(runner)

    def _beat_once(self, runner: str) -> None:
        try:
            self._client().set(alive_key(runner), 1, px=self._ttl_ms)
        except redis.RedisError as exc:
            # Its jobs look lost until it beats again: at worst one run of each is repeated.
            log.warning("heartbeat %s not sent: %s", runner, exc)
