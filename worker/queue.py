"""The Celery implementation of the domain's JobQueue."""

from __future__ import annotations

from celery import Celery

from shared.queue import Job


class CeleryJobQueue:
    def __init__(self, app: Celery) -> None:
        self._app = app

    def send(self, job: Job) -> None:
        # send_task by name: the sender never imports task code; routes pick the queue.
        self._app.send_task(job.task, kwargs=job.kwargs, countdown=job.countdown)
