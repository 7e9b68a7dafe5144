"""Sending background jobs, behind a Protocol so the domain never imports Celery."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Job:
    """A background job: a task name and its keyword arguments (ids, never objects)."""

    task: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    countdown: float | None = None


class JobQueue(Protocol):
    def send(self, job: Job) -> None:
        """Hand the job to the broker; raises if the broker cannot take it."""


class RecordingQueue:
    """An in-memory JobQueue for unit tests and dry runs."""

    def __init__(self) -> None:
        self.sent: list[Job] = []

    def send(self, job: Job) -> None:
        self.sent.append(job)


# Task names are the contract between web and worker; both import them from here.
SUMMARIZE_TOPIC = "driftless.summarize_topic"
RECONCILE = "driftless.reconcile"
INVALIDATE_MEMORY = "driftless.invalidate_memory"
EVALUATE_TOPIC = "driftless.evaluate_topic"
FIRE_DEBOUNCE = "driftless.fire_debounce"
SWEEP_IDLE = "driftless.sweep_idle"
PURGE_IDLE_SESSIONS = "driftless.purge_idle_sessions"
