"""Jobs reach exactly the queue their task is routed to (and no other)."""

from __future__ import annotations

import pytest
import redis

from shared.infra.config import Settings
from shared.infra.queue import (
    FAST_QUEUE,
    LLM_QUEUE,
    RECONCILE,
    SUMMARIZE_TOPIC,
    CeleryJobQueue,
    Job,
)
from tests import services
from worker.app import make_celery

# A broker database of its own, beside the suite's (see tests/services.py).
ROUTING_REDIS_DB = services.DATA_REDIS_DB - 2


@pytest.mark.parametrize(
    ("task", "queue", "other"),
    [(SUMMARIZE_TOPIC, LLM_QUEUE, FAST_QUEUE), (RECONCILE, FAST_QUEUE, LLM_QUEUE)],
)
def test_a_job_lands_once_in_its_own_queue(
    settings: Settings, task: str, queue: str, other: str
) -> None:
    broker = f"{services.redis_base_url()}/{ROUTING_REDIS_DB}"
    client = redis.Redis.from_url(broker)
    client.flushdb()
    app = make_celery(settings.model_copy(update={"broker_url": broker}))
    with app.connection_for_write() as connection:
        for declared in app.amqp.queues.values():  # as a worker consuming both would
            declared.bind(connection).declare()
    CeleryJobQueue(app).send(Job(task, {}))
    assert client.llen(queue) == 1
    assert client.llen(other) == 0
    client.flushdb()
