"""Beat's scheduler (worker/beat.py) on the test Redis: what a restart with other settings,
a second beat and a Redis that lost every key do to the schedule it keeps there.

Each scheduler is driven tick by tick in this process; the jobs it sends go to a queue
of the data Redis database (the broker of these apps), emptied after each test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from celery.schedules import crontab

from shared.infra.config import Settings
from shared.infra.queue import QUEUES
from tests import services
from worker.app import make_celery
from worker.beat import KEY_PREFIX, LOCK_KEY, Scheduler


@pytest.fixture
def state(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    forget_beat(client)
    yield client
    forget_beat(client)
    client.delete(*QUEUES)


def forget_beat(client: redis.Redis) -> None:
    """What a Redis restarted without persistence leaves of beat's keys: none."""
    keys = list(client.scan_iter(KEY_PREFIX + "*"))
    if keys:
        client.delete(*keys)


def app_of(redis_url: str, **values: object) -> Celery:
    settings = Settings(
        database_url=services.admin_database_url(),  # beat never connects
        redis_url=redis_url,
        broker_url=redis_url,
        llm="local",
        secret_keys=services.SEALING_KEY,
        **values,  # type: ignore[arg-type]
    )
    return make_celery(settings)


def beat(app: Celery, tmp_path: Path, name: str = "beat") -> Scheduler:
    return Scheduler(app=app, schedule_filename=str(tmp_path / name))


def entries(client: redis.Redis) -> set[str]:
    """The names of the schedule's entries, as beat keeps them in Redis."""
    return {
        key.removeprefix(KEY_PREFIX)
        for key in client.zrange(KEY_PREFIX + ":schedule", 0, -1)  # redbeat's index
    }


def test_a_restart_with_other_settings_drops_removed_entries_and_keeps_the_new_period_42(
    redis_url: str, state: redis.Redis, tmp_path: Path
) -> None:
    old = beat(app_of(redis_url, reconcile_s=60, retention_s=3600), tmp_path)
    old.tick()
    assert {"reconcile", "retention"} <= entries(state)

    # Restarted without retention and with another reconcile period.
    new = beat(app_of(redis_url, reconcile_s=7, retention_s=0), tmp_path)
    new.tick()
    assert "retention" not in entries(state)  # never sent again
    stored = new.Entry.from_key(KEY_PREFIX + "reconcile", app=new.app)
    assert stored.schedule.run_every.total_seconds() == 7


def test_a_second_beat_stands_by_and_sends_nothing_42(
    redis_url: str, state: redis.Redis, tmp_path: Path
) -> None:
    active = beat(app_of(redis_url, reconcile_s=1), tmp_path, "active")
    standby = beat(app_of(redis_url, reconcile_s=1), tmp_path, "standby")
    active.tick()  # takes the lock; a new entry is first due one period later
    time.sleep(1.2)  # the reconciler is due: whichever beat ticks now owes it

    assert standby.tick() == standby.max_interval
    assert standby.tick() == standby.max_interval
    assert standby.lock is None  # it never held one, so it never lost one
    assert sum(state.llen(queue) for queue in QUEUES) == 0  # the standby sent nothing
    active.tick()
    assert sum(state.llen(queue) for queue in QUEUES) > 0  # the active one did
    assert (active.active, standby.active) == (True, False)
    assert (tmp_path / "standby").exists()  # its tick stamp: the liveness probe's file


def test_a_beat_whose_redis_lost_every_key_takes_the_lock_and_schedule_again_42(
    redis_url: str, state: redis.Redis, tmp_path: Path
) -> None:
    scheduler = beat(app_of(redis_url), tmp_path)
    scheduler.tick()
    installed = entries(state)
    forget_beat(state)  # Redis restarted empty under a running beat

    scheduler.tick()  # redbeat's own tick would raise LockNotOwnedError and end beat

    assert scheduler.active
    assert state.get(LOCK_KEY) is not None
    assert entries(state) == installed


def test_the_reevaluation_crontab_is_kept_in_redis_as_that_crontab_42(
    redis_url: str, state: redis.Redis, tmp_path: Path
) -> None:
    scheduler = beat(app_of(redis_url, reevaluate_cron="30 3 * * 1"), tmp_path)
    scheduler.tick()
    stored = scheduler.Entry.from_key(KEY_PREFIX + "reevaluate-stale", app=scheduler.app)
    assert isinstance(stored.schedule, crontab)
    assert (stored.schedule.minute, stored.schedule.hour, stored.schedule.day_of_week) == (
        {30},
        {3},
        {1},
    )
