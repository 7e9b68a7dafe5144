"""Each job a worker runs beats in Redis while it runs: the mark of a running job
(shared/infra/held.py) counts only while its run's key lives. A run that ends, however it
ends, stops beating in the process at once, even when Redis cannot be told (a blip at
the job's end); a worker killed with `kill -9` stops every beat of its runs. So a job no
worker runs any more is known lost within one key's lifetime, not after the running
mark's expiry.

One key a run, set when the job is popped (by the pop's script, so that it is held from
the start), refreshed every third of its lifetime by one daemon thread a process (a
greenlet under gevent's patching) for all its runs, in one pipeline:
  driftless:alive:<host>:<pid>:<random>
The thread starts on the first run in a process, and again in a forked child (prefork),
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
    """The runs of this process, each alive in Redis while it runs."""

    def __init__(self, client: Callable[[], redis.Redis], *, ttl_s: float) -> None:
        self._client = client
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self._every_s = ttl_s / 3
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._runs: set[str] = set()

    def begin(self) -> str:
        """A new run's name, beaten for until `end` once its key is set (the pop's script
        or `HeldJobs.running` sets it with `ttl_ms`)."""
        run = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        with self._lock:
            if self._pid != os.getpid():  # first run here, or a forked child's
                self._runs = set()
                threading.Thread(target=self._beat, name="driftless-heartbeat", daemon=True).start()
                self._pid = os.getpid()
            self._runs.add(run)
        return run

    def end(self, run: str) -> None:
        """The run is over: no longer beaten for, whether or not Redis heard of its end."""
        with self._lock:
            self._runs.discard(run)

    def _beat(self) -> None:
        while True:
            time.sleep(self._every_s)
            with self._lock:
                runs = list(self._runs)
            if runs:
                self._beat_once(runs)

    def _beat_once(self, runs: list[str]) -> None:
        try:
            with self._client().pipeline(transaction=False) as pipe:
                for run in runs:
                    pipe.set(alive_key(run), 1, px=self.ttl_ms)
                pipe.execute()
        except redis.RedisError as exc:
            # Its jobs look lost until it beats again: at worst one run of each is repeated.
            log.warning("heartbeat of %d runs not sent: %s", len(runs), exc)
