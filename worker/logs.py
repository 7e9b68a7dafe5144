"""Celery's side of logging: our handler, not Celery's; the running task's ids bound; beat's
idle housekeeping kept out of the INFO log.

The handler itself is shared/infra/logs.py, which every entry point configures.
"""

from __future__ import annotations

import ast
import logging
from typing import Any

from celery import Task
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS
from celery.signals import setup_logging, task_postrun, task_prerun

from shared.infra import logcontext
from shared.infra.logs import LogFormat, configure_logging
from shared.infra.queue import (
    ADVANCE_REEVALUATIONS,
    DISPATCH_WEBHOOKS,
    EMBED_PENDING,
    PURGE_IDLE_SESSIONS,
    RECONCILE,
    SWEEP_IDLE,
)

# Beat's periodic tasks whose result counts the work they did: the re-evaluation pump
# every second, the embeddings planner every 2 s (with embeddings on), the others every
# minute or more. Celery logs three INFO lines for each run (beat sent it, a worker
# received it, it succeeded), which made the pump alone most of an idle system's log.
# Those lines are DEBUG, but for the result of a run that did something; the work it
# started logs lines of its own.
HOUSEKEEPING = frozenset(
    {
        ADVANCE_REEVALUATIONS, EMBED_PENDING, RECONCILE, DISPATCH_WEBHOOKS, SWEEP_IDLE,
        PURGE_IDLE_SESSIONS,
    }
)  # fmt: skip
BEAT_SENDS = "Scheduler: Sending due task %s (%s)"  # celery.beat's line, args (entry, task)
# The loggers of those lines: beat's, the worker's on receipt, and the task tracer's.
CELERY_TASK_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")


def _nothing_done(result: str) -> bool:
    """Whether a result, as Celery logs it (its repr), is counts that are all 0. A text
    among a result's fields is its state (the planner's "done", "busy"), not a count."""
    try:
        value = ast.literal_eval(result)
    except (ValueError, SyntaxError):
        return False
    if isinstance(value, dict):
        counts = [field for field in value.values() if not isinstance(field, str)]
    else:
        counts = [value]
    return all(type(count) is int and count == 0 for count in counts)


def _idle_housekeeping(record: logging.LogRecord) -> bool:
    """Whether `record` is one of Celery's lines about a housekeeping run with nothing to do."""
    if record.msg == BEAT_SENDS and isinstance(record.args, tuple):
        return len(record.args) == 2 and record.args[1] in HOUSEKEEPING
    data = getattr(record, "data", None)  # Celery passes its context "for custom handlers"
    if not isinstance(data, dict) or data.get("name") not in HOUSEKEEPING:
        return False
    if record.msg == LOG_RECEIVED:
        return True
    return record.msg == LOG_SUCCESS and _nothing_done(str(data.get("return_value")))


class QuietHousekeeping(logging.Filter):
    """Lowers Celery's INFO lines about idle housekeeping runs to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not _idle_housekeeping(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_QUIET_HOUSEKEEPING = QuietHousekeeping()


def _bind_task(task_id: str, task: Task, kwargs: dict[str, Any] | None = None, **_: Any) -> None:
    # A pool thread runs task after task: start clean, never with the last task's ids.
    logcontext.clear()
    logcontext.bind(task_id=task_id, topic_id=(kwargs or {}).get("topic_id"))


def _unbind_task(**_: Any) -> None:
    logcontext.clear()


def connect_task_context() -> None:
    """Bind task_id and topic_id (from the task's kwargs) for the duration of each task."""
    task_prerun.connect(_bind_task, weak=False, dispatch_uid="driftless-logs-prerun")
    task_postrun.connect(_unbind_task, weak=False, dispatch_uid="driftless-logs-postrun")


def keep_celery_off_logging(log_format: LogFormat) -> None:
    """`celery worker|beat` would add handlers of its own; a setup_logging receiver stops
    that, and installs ours instead (LOG_LEVEL first, else the command's --loglevel).
    Celery's lines about idle housekeeping runs go at DEBUG."""

    def _setup(loglevel: Any = None, **_: Any) -> None:
        level = logging.getLevelName(loglevel) if isinstance(loglevel, int) else loglevel
        configure_logging(log_format, level=level)

    setup_logging.connect(_setup, weak=False, dispatch_uid="driftless-logs-setup")
    for name in CELERY_TASK_LOGGERS:
        logging.getLogger(name).addFilter(_QUIET_HOUSEKEEPING)  # once, however many calls
