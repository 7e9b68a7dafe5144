"""The Celery implementation of the domain's JobQueue."""

from __future__ import annotations

from celery import Celery

from shared.queue import Job
from worker.metrics import JOBS_ENQUEUED, JOBS_SEND_FAILED, job_headers


class CeleryJobQueue:
    def __init__(self, app: Celery) -> None:
        self._app = app

    def send(self, job: Job) -> None:
        # send_task by name: the sender never imports task code; routes pick the queue.
        # The headers let the worker measure queue lag from when the job became due.
        try:
            self._app.send_task(
                job.task,
                kwargs=job.kwargs,
                countdown=job.countdown,
                headers=job_headers(job.countdown),
            )
        except Exception:
            JOBS_SEND_FAILED.labels(job.task).inc()
            raise
        JOBS_ENQUEUED.labels(job.task).inc()
