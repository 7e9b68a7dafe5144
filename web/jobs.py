"""How the web sends jobs: a Celery app that only produces, configured like every sender.

It knows the tasks by name and the routes (shared/infra/broker.py), never the task code, so
the web does not import the worker.
"""

from __future__ import annotations

from celery import Celery

from shared.bootstrap import Runtime
from shared.infra.broker import sender_settings
from shared.infra.queue import CeleryJobQueue, JobQueue


def make_job_queue(runtime: Runtime) -> JobQueue:
    """Model jobs wait their org's turn in the runtime's Redis (shared/infra/fair.py)."""
    producer = Celery("driftless-web", set_as_current=False)
    producer.conf.update(sender_settings(runtime.endpoints))
    return CeleryJobQueue(producer, runtime.fair)
