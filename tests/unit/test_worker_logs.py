"""Beat's housekeeping runs that find nothing to do stay out of the INFO log; a run that
did something, and every other task, are logged as Celery logs them."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS

from shared.infra.queue import (
    ADVANCE_REEVALUATIONS,
    EMBED_PENDING,
    RECONCILE,
    SUMMARIZE_TOPIC,
    SWEEP_IDLE,
)
from worker.logs import BEAT_SENDS, QuietHousekeeping


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logged() -> Iterator[list[logging.LogRecord]]:
    """What a celery logger with the filter lets through, at INFO."""
    handler = Collect()
    logger = logging.getLogger("celery.app.trace.probe")
    logger.addHandler(handler)
    logger.addFilter(QuietHousekeeping())
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield handler.records
    logger.removeHandler(handler)
    logger.filters.clear()
    logger.setLevel(logging.NOTSET)
    logger.propagate = True


def _sent(task: str) -> None:
    logging.getLogger("celery.app.trace.probe").info(BEAT_SENDS, "entry", task)


def _received(task: str) -> None:
    context = {"id": "t-1", "name": task, "args": "()", "kwargs": "{}", "eta": None}
    logging.getLogger("celery.app.trace.probe").info(LOG_RECEIVED, context, extra={"data": context})


def _succeeded(task: str, result: str) -> None:
    context = {"id": "t-1", "name": task, "return_value": result, "runtime": 0.002}
    logging.getLogger("celery.app.trace.probe").info(LOG_SUCCESS, context, extra={"data": context})


IDLE_PUMP = "{'enqueued': 0, 'resent': 0, 'given_up': 0, 'finished': 0}"


def test_an_idle_pump_tick_logs_nothing_at_info(logged: list[logging.LogRecord]) -> None:
    _sent(ADVANCE_REEVALUATIONS)
    _received(ADVANCE_REEVALUATIONS)
    _succeeded(ADVANCE_REEVALUATIONS, IDLE_PUMP)
    _succeeded(SWEEP_IDLE, "0")
    _succeeded(RECONCILE, "{'summaries': 0, 'evaluations': 0, 'memory_caches': 0}")
    assert logged == []


def test_a_run_that_did_something_logs_its_result(logged: list[logging.LogRecord]) -> None:
    _succeeded(ADVANCE_REEVALUATIONS, "{'enqueued': 2, 'resent': 0, 'given_up': 0, 'finished': 0}")
    _succeeded(SWEEP_IDLE, "3")
    _succeeded(RECONCILE, "<unexpected>")
    assert [r.levelname for r in logged] == ["INFO"] * 3
    assert "'enqueued': 2" in logged[0].getMessage()


def test_other_tasks_are_logged_as_celery_logs_them(logged: list[logging.LogRecord]) -> None:
    _sent(SUMMARIZE_TOPIC)
    _received(SUMMARIZE_TOPIC)
    _succeeded(SUMMARIZE_TOPIC, "'refresh'")
    assert [r.levelname for r in logged] == ["INFO"] * 3


def test_at_debug_the_idle_runs_show_as_debug(logged: list[logging.LogRecord]) -> None:
    logging.getLogger("celery.app.trace.probe").setLevel(logging.DEBUG)
    _received(ADVANCE_REEVALUATIONS)
    _succeeded(ADVANCE_REEVALUATIONS, IDLE_PUMP)
    assert [r.levelname for r in logged] == ["DEBUG", "DEBUG"]


def test_an_idle_embeddings_tick_logs_nothing_at_info_and_a_planning_one_does_43(
    logged: list[logging.LogRecord],
) -> None:
    # With embeddings on, beat sends the planner every 2 s: three lines a tick, idle or not.
    for state in ("done", "busy", "off"):
        _sent(EMBED_PENDING)
        _received(EMBED_PENDING)
        _succeeded(EMBED_PENDING, f"{{'messages': 0, 'topics': 0, 'jobs': 0, 'state': '{state}'}}")
    assert logged == []
    _succeeded(EMBED_PENDING, "{'messages': 12, 'topics': 1, 'jobs': 2, 'state': 'done'}")
    assert [r.levelname for r in logged] == ["INFO"]
    assert "'messages': 12" in logged[0].getMessage()
