"""How the web sends jobs: a Celery app that only produces, configured like every sender.

It knows the tasks by name and the routes (shared/infra/broker.py), never the task code, so
the web does not import the worker.
"""

from __future__ import annotations

from celery import Celery

from shared.infra.broker import sender_settings
from shared.infra.queue import CeleryJobQueue, JobQueue
from shared.infra.runtime import Endpoints


def make_job_queue(endpoints: Endpoints) -> JobQueue:
    producer = Celery("driftless-web", set_as_current=False)
    producer.conf.update(sender_settings(endpoints))
    return CeleryJobQueue(producer)
