"""Jobs reach exactly the queue their task is routed to (and no other)."""

from __future__ import annotations

import pytest
import redis

from shared.infra.config import Settings
from shared.infra.queue import (
    FAST_QUEUE,
    LLM_BULK_QUEUE,
    LLM_QUEUE,
    RECONCILE,
    SUMMARIZE_TOPIC,
    CeleryJobQueue,
    Job,
    Lane,
)
from tests import services
from worker.app import make_celery

# A broker database of its own, beside the suite's (see tests/services.py).
ROUTING_REDIS_DB = services.DATA_REDIS_DB - 2


@pytest.mark.parametrize(
    ("task", "lane", "queue", "others"),
    [
        (SUMMARIZE_TOPIC, "live", LLM_QUEUE, (FAST_QUEUE, LLM_BULK_QUEUE)),
        (SUMMARIZE_TOPIC, "bulk", LLM_BULK_QUEUE, (FAST_QUEUE, LLM_QUEUE)),
        (RECONCILE, "live", FAST_QUEUE, (LLM_QUEUE, LLM_BULK_QUEUE)),
    ],
)
def test_a_job_lands_once_in_its_own_queue(
    settings: Settings, task: str, lane: Lane, queue: str, others: tuple[str, ...]
) -> None:
    broker = f"{services.redis_base_url()}/{ROUTING_REDIS_DB}"
    client = redis.Redis.from_url(broker)
    client.flushdb()
    app = make_celery(settings.model_copy(update={"broker_url": broker}))
    with app.connection_for_write() as connection:
        for declared in app.amqp.queues.values():  # as a worker consuming all would
            declared.bind(connection).declare()
    CeleryJobQueue(app).send(Job(task, {}, lane=lane))
    assert client.llen(queue) == 1
    assert [client.llen(other) for other in others] == [0, 0]
    client.flushdb()
