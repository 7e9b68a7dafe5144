"""DRIFTLESS_REEVALUATE_CRON: a bad crontab line stops the process at start naming the
variable; a good one is a beat entry that starts the stale re-evaluation. The check is
the domain's own (shared/infra/crontab.py, no Celery), held here to what Celery accepts."""

from __future__ import annotations

import pytest
from celery.schedules import crontab

from shared.infra.config import ConfigError, load_settings
from shared.infra.crontab import parse_crontab
from shared.infra.queue import ADVANCE_REEVALUATIONS, START_STALE_REEVALUATION, TASK_ROUTES
from worker.app import beat_schedule

VARIABLE = "DRIFTLESS_REEVALUATE_CRON"
GOOD = [
    "* * * * *",
    "0 3 * * *",
    "*/15 2-4 * * mon-fri",
    "30 1 1,15 jan-jun/2 sun",
    "5-50/5 0-23 1-31 1-12 0-6",
    "0 0 * * Saturday",
    "0 22 * * fri-mon",  # wraps around the week, as Celery reads it
]
BAD = [
    ("0 3", "5 fields"),
    ("* * * *", "not 4"),
    ("* * * * * *", "not 6"),
    ("60 * * * *", "minute 60 is outside 0-59"),
    ("* 24 * * *", "hour 24"),
    ("* * 0 * *", "day of month 0"),
    ("* * * 13 *", "month 13"),
    ("* * * * 7", "day of week 7 is outside 0-6"),
    ("5/15 * * * *", "minute '5/15'"),  # Celery refuses a step without * or a range
    ("*/0 * * * *", "step must be at least 1"),
    ("* * * * mo", "day of week 'mo'"),
    ("* * * mon *", "month 'mon'"),
    ("0 3 * * mon,", "day of week ''"),
    ("@daily", "5 fields"),
]


@pytest.mark.parametrize("line", GOOD)
def test_a_line_accepted_here_is_one_celery_accepts(line: str) -> None:
    crontab(**parse_crontab(line)._asdict())  # raises on what Celery refuses


@pytest.mark.parametrize(("line", "why"), BAD)
def test_a_bad_line_stops_the_process_naming_the_variable_and_the_fault(
    line: str, why: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({VARIABLE: line})
    message = str(raised.value)
    assert VARIABLE in message
    assert why in message


def test_unset_by_default_and_no_stale_campaign_is_scheduled() -> None:
    settings = load_settings({})
    assert settings.reevaluate_cron is None
    schedule = beat_schedule(settings)
    assert all(entry["task"] != START_STALE_REEVALUATION for entry in schedule.values())
    # The pump runs whatever the setting: API and CLI campaigns need it.
    [pump] = [e for e in schedule.values() if e["task"] == ADVANCE_REEVALUATIONS]
    assert pump["schedule"] == 1.0


def test_a_good_line_is_a_beat_entry_on_that_crontab() -> None:
    settings = load_settings({VARIABLE: "*/30 2 * * mon-fri"})
    [entry] = [e for e in beat_schedule(settings).values() if e["task"] == START_STALE_REEVALUATION]
    schedule = entry["schedule"]
    assert isinstance(schedule, crontab)
    assert schedule == crontab(minute="*/30", hour="2", day_of_week="mon-fri")
    assert TASK_ROUTES[START_STALE_REEVALUATION] == {"queue": "fast"}
