"""Celery's side of logging: our handler, not Celery's; the running task's ids bound.

The handler itself is shared/infra/logs.py, which every entry point configures.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.signals import setup_logging, task_postrun, task_prerun

from shared.infra import logcontext
from shared.infra.logs import LogFormat, configure_logging


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
    that, and installs ours instead (LOG_LEVEL first, else the command's --loglevel)."""

    def _setup(loglevel: Any = None, **_: Any) -> None:
        level = logging.getLevelName(loglevel) if isinstance(loglevel, int) else loglevel
        configure_logging(log_format, level=level)

    setup_logging.connect(_setup, weak=False, dispatch_uid="driftless-logs-setup")
