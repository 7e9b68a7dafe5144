"""R15 from a worker: the memory-cache invalidation a worker's own transaction causes is
done by the worker once it commits (worker/context.py WorkerJobQueue), on the real Redis;
when Redis refuses, the job is sent as before, for another worker to do."""

from __future__ import annotations

import uuid

import redis

from shared.infra.queue import INVALIDATE_MEMORY, SUMMARIZE_TOPIC, Job, RecordingQueue
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from worker.context import WorkerJobQueue

CLOSED_PORT_URL = "redis://127.0.0.1:1/0"  # nothing listens: every command fails


def _scope() -> Scope:
    return Scope(org_id=uuid.uuid4(), agent_id="agent", user_id=f"user-{uuid.uuid4().hex[:6]}")


def test_a_worker_invalidates_the_cache_itself_and_sends_no_job(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    cache, scope, sent = MemoryCache(client), _scope(), RecordingQueue()
    before = cache.generation(scope)

    WorkerJobQueue(sent, lambda: client).send(Job(INVALIDATE_MEMORY, scope.as_job_kwargs()))

    assert cache.generation(scope) != before  # a reader that read before must not store
    assert sent.sent == []


def test_other_jobs_go_to_the_broker(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    sent = RecordingQueue()
    job = Job(SUMMARIZE_TOPIC, {"topic_id": str(uuid.uuid4())})

    WorkerJobQueue(sent, lambda: client).send(job)

    assert sent.sent == [job]


def test_when_redis_refuses_the_invalidation_is_sent_as_a_job() -> None:
    unreachable = redis.Redis.from_url(CLOSED_PORT_URL, socket_connect_timeout=0.5)
    sent = RecordingQueue()
    job = Job(INVALIDATE_MEMORY, _scope().as_job_kwargs())

    WorkerJobQueue(sent, lambda: unreachable).send(job)

    assert sent.sent == [job]
