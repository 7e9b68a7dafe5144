"""Beat's scheduler: celery-redbeat's, whose Redis lock lets two beats run, one active.

Every beat keeps its entries in the state Redis (REDIS_URL) under `driftless:beat:`; only
the holder of the lock `driftless:beat::lock` sends. The holder extends the lock at every
tick (at least every MAX_LOOP_S); a beat killed with -9 stops extending it, the lock
expires after LOCK_TIMEOUT_S, and the standby, which tries to take it at each of its own
ticks, becomes the active one: periodic work pauses at most LOCK_TIMEOUT_S + MAX_LOOP_S.
Each entry's last run is in Redis too, so the new holder sends only what is due.

Why REDIS_URL and not the broker's: CELERY_BROKER_URL may be RabbitMQ, while the state
Redis is always there (the embedded one under `make run`), and it already holds our other
leases. The trade-off of the lock period: shorter means a shorter pause after a crash, but
a beat stalled longer than it (a Redis hiccup, a paused VM) loses the lock to the standby;
20 s pauses the reconciler (60 s) for less than one of its periods.

On top of redbeat's scheduler (which exits when an extension fails), a beat that finds the
lock lost or Redis unreachable sends nothing and tries again at its next tick, so a Redis
restart never ends it. A beat that becomes active installs its own schedule again: Redis
may have restarted empty, and the active beat's settings are the ones that should run.
Redbeat's own take at start, which blocks a standby before its loop, is disconnected: every
beat ticks, active or not, and touches its `--schedule` file at each tick, which is what
the liveness probe of deploy/k8s/beat.yaml reads (redbeat keeps no schedule file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery.signals import beat_init
from celery.utils.log import get_logger
from redbeat.schedulers import (
    LUA_EXTEND_TO_SCRIPT,
    RedBeatScheduler,
    acquire_distributed_beat_lock,
    get_redis,
)
from redis.exceptions import LockError, RedisError

from shared.infra.redis_url import is_sentinel, parse_sentinel_url
from shared.infra.runtime import Endpoints

logger = get_logger("celery.beat")
# Our tick takes the lock without blocking the loop (above).
beat_init.disconnect(acquire_distributed_beat_lock)

# Seconds the lock outlives its holder's last extension: the longest pause after a crash
# (plus one loop), well within two of them (the fault suite's bound).
LOCK_TIMEOUT_S = 20
# The longest sleep of beat's loop: the holder extends the lock at least this often, and a
# standby tries to take it this often. Far below LOCK_TIMEOUT_S: a slow tick or two never
# costs the lock.
MAX_LOOP_S = 5
KEY_PREFIX = "driftless:beat:"
LOCK_KEY = KEY_PREFIX + ":lock"  # redbeat's own naming: `<prefix>:lock`


def beat_settings(endpoints: Endpoints) -> dict[str, Any]:
    """The Celery settings of beat's scheduler (harmless in a worker, which never reads them)."""
    # Set, so redbeat does not borrow the broker's transport options; a Redis that hangs
    # costs a tick, not the loop.
    options: dict[str, Any] = {"socket_timeout": MAX_LOOP_S, "socket_connect_timeout": MAX_LOOP_S}
    url = endpoints.redis_url
    if is_sentinel(url):
        # redbeat's own spelling of a Sentinel primary: any URL of its scheme, the rest
        # in its options (it asks the sentinels for the primary at each reconnect).
        parsed = parse_sentinel_url(url)
        url = "redis-sentinel://"
        options = {
            "socket_timeout": MAX_LOOP_S,
            "sentinels": list(parsed.sentinels),
            "service_name": parsed.master_name,
            "db": parsed.db,
            "password": parsed.password,
        }
    return {
        "beat_scheduler": "worker.beat:Scheduler",
        "beat_max_loop_interval": MAX_LOOP_S,
        "redbeat_redis_url": url,
        "redbeat_key_prefix": KEY_PREFIX,
        "redbeat_lock_key": LOCK_KEY,
        "redbeat_lock_timeout": LOCK_TIMEOUT_S,
        "redbeat_redis_options": options,
    }


class Scheduler(RedBeatScheduler):
    """redbeat's scheduler, sending only while it holds the lock and surviving a lost one."""

    lock: Any = None  # redis-py's Lock while this beat holds it or tries to
    active = False

    def __init__(self, app: Any, *, schedule_filename: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.stamp = Path(schedule_filename) if schedule_filename else None

    def tick(self, min: Any = min, **kwargs: Any) -> float:
        self._touch_stamp()
        try:
            if not self._hold_lock():
                return float(self.max_interval)
            return float(super().tick(min=min, **kwargs))
        except RedisError as exc:
            logger.warning("beat: Redis unreachable, sending nothing until it answers: %r", exc)
            self.active = False
            return float(self.max_interval)

    def _touch_stamp(self) -> None:
        if self.stamp is None:
            return
        try:
            self.stamp.touch()
        except OSError as exc:  # a probe that finds no stamp restarts beat; say why
            logger.warning("beat: cannot touch %s: %r", self.stamp, exc)

    def _hold_lock(self) -> bool:
        """Extend the lock if ours, else try to take it; whether this beat is the active one."""
        if self.lock is not None:
            try:
                self.lock.extend(int(self.lock_timeout))
            except LockError:
                logger.warning("beat: Lost the lock; standing by")
                self.lock, self.active = None, False
            else:
                return self._became_active()
        lock = self._new_lock()
        if not lock.acquire(blocking=False):
            return False  # a standby: self.lock stays None until it holds one
        self.lock = lock
        logger.info("beat: Acquired lock")
        return self._became_active()

    def _became_active(self) -> bool:
        if not self.active:
            self.active = True
            logger.info("beat: Active; installing the schedule")
            self.setup_schedule()
        return True

    def _new_lock(self) -> Any:
        # As redbeat's own acquisition (acquire_distributed_beat_lock), bar its blocking.
        client = get_redis(self.app)
        lock = client.lock(self.lock_key, timeout=self.lock_timeout, sleep=self.max_interval)
        lock.lua_extend = client.register_script(LUA_EXTEND_TO_SCRIPT)
        return lock
