"""Two beats, one active: `kill -9` of the active one and the standby takes over.

Both run the Procfile's beat against a Redis of the test's own (state in db 0, broker in
db 1) with the reconciler every 2 s, and no worker: every reconcile job beat sends stays
on the broker, where its `origin` header names the beat process that sent it. Sends are
read off the queue as they arrive, so the test sees who sent what and roughly when.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis

from shared.infra.queue import ADVANCE_REEVALUATIONS, FAST_QUEUE, RECONCILE
from tests.faults.procs import Child, PrivateRedis, Processes, driftless_env, wait_until
from worker.beat import LOCK_KEY, LOCK_TIMEOUT_S

RECONCILE_S = 2


@dataclass
class Send:
    pid: int
    task: str
    seen_at: float  # monotonic, when the test first saw it on the queue


class Sends:
    """The periodic jobs on the `fast` queue, in the order beat sent them."""

    def __init__(self, broker: redis.Redis) -> None:
        self.broker = broker
        self.seen: list[Send] = []
        self.read = 0  # messages of the queue already looked at

    def poll(self, task: str = RECONCILE) -> list[Send]:
        # kombu LPUSHes: the oldest message is the last of the list.
        bodies = self.broker.lrange(FAST_QUEUE, 0, -1)[::-1]
        now = time.monotonic()
        for body in bodies[self.read :]:
            headers = json.loads(body)["headers"]  # origin: "gen<pid>@<host>"
            self.seen.append(Send(int(headers["origin"].split("@")[0][3:]), headers["task"], now))
        self.read = len(bodies)
        return [s for s in self.seen if s.task == task]

    def of(self, beat: Child, task: str = RECONCILE) -> list[Send]:
        return [s for s in self.poll(task) if s.pid == beat.pid]


def at_most_once_per_period(sends: list[Send]) -> None:
    """Never twice as often as the entry's period: one beat's sends, or two beats' in turn."""
    span = sends[-1].seen_at - sends[0].seen_at
    # A poll that lags sees two at once; over the whole span the count still holds.
    assert len(sends) <= span / RECONCILE_S + 2, (len(sends), span)


def test_the_standby_beat_takes_over_within_two_lock_periods_42(
    processes: Processes, private_redis: PrivateRedis
) -> None:
    state_url = private_redis.url  # db 0
    broker_url = state_url.removesuffix("/0") + "/1"
    env = driftless_env(
        DATABASE_URL="postgresql://postgres@127.0.0.1:5432/unused",  # beat never connects
        REDIS_URL=state_url,
        CELERY_BROKER_URL=broker_url,
        DRIFTLESS_RECONCILE_S=str(RECONCILE_S),
    )
    beats = [processes.beat(env, wait=False), processes.beat(env, wait=False)]
    for beat in beats:
        beat.wait_ready()
    sends = Sends(redis.Redis.from_url(broker_url))
    state = redis.Redis.from_url(state_url)

    # Exactly one is active: every reconcile job so far comes from one beat, the lock's owner.
    wait_until(lambda: len(sends.poll()) >= 4, timeout=60, what="four reconcile sends")
    active_pids = {s.pid for s in sends.poll()}
    assert len(active_pids) == 1, active_pids
    (active,) = [b for b in beats if b.pid in active_pids]
    (standby,) = [b for b in beats if b is not active]
    assert state.get(LOCK_KEY) is not None
    assert "beat: Acquired lock" in active.output()
    assert "beat: Acquired lock" not in standby.output()
    time.sleep(3 * RECONCILE_S)  # both keep running a while: still only the active one sends
    assert not sends.of(standby), standby.tail()
    assert "beat: Lost the lock" not in standby.output()  # a quiet standby: it never held it
    before_kill = sends.of(active)
    at_most_once_per_period(before_kill)

    active.kill()  # kill -9 of its process group
    killed_at = time.monotonic()
    wait_until(
        lambda: len(sends.of(standby)) >= 1,
        timeout=2 * LOCK_TIMEOUT_S,
        what=lambda: f"the standby to send within two lock periods:\n{standby.tail()}",
    )
    taken_over_s = time.monotonic() - killed_at
    # A campaign's pump (every second) goes on too, from the new holder alone.
    wait_until(
        lambda: sends.of(standby, ADVANCE_REEVALUATIONS),
        timeout=2 * LOCK_TIMEOUT_S - taken_over_s,
        what="the standby to send the campaign pump",
    )
    pump = sends.poll(ADVANCE_REEVALUATIONS)
    assert {s.pid for s in pump} == {active.pid, standby.pid}
    wait_until(lambda: len(sends.of(standby)) >= 4, timeout=60, what="the standby's sends")
    assert standby.alive()
    assert "beat: Acquired lock" in standby.output()
    after = sends.of(standby)
    at_most_once_per_period(after)
    # The two beats in turn: never a burst at the takeover either.
    at_most_once_per_period(sends.poll())
    print(f"standby sent {taken_over_s:.1f} s after the kill (lock period {LOCK_TIMEOUT_S} s)")
