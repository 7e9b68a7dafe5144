"""[4.2] The planner's jobs: a job per org and run of at most a batch of its ids, in order."""

from __future__ import annotations

import uuid

from shared.embeddings.store import Pending
from shared.embeddings.sweep import org_jobs
from shared.infra.queue import EMBED_NEW, EMBEDDINGS_QUEUE, TASK_ROUTES

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def test_each_job_holds_one_orgs_ids_at_most_a_batch_of_them_in_id_order_42() -> None:
    messages = [Pending(i, A if i % 3 else B, "") for i in range(1, 11)]
    topics = [Pending(uuid.UUID(int=100 + i), B, "") for i in range(3)]
    jobs = org_jobs(messages, topics, batch=3)
    assert [job.kwargs for job in jobs] == [
        {"message_ids": [1, 2, 4]}, {"message_ids": [5, 7, 8]}, {"message_ids": [10]},
        {"message_ids": [3, 6, 9]},
        {"topic_ids": [str(uuid.UUID(int=100)), str(uuid.UUID(int=101)),
                       str(uuid.UUID(int=102))]},
    ]  # fmt: skip
    assert {job.task for job in jobs} == {EMBED_NEW}


def test_the_planners_jobs_go_to_the_embeddings_queue_not_the_bulk_one_42() -> None:
    assert TASK_ROUTES[EMBED_NEW] == {"queue": EMBEDDINGS_QUEUE}
    assert org_jobs([], [], batch=3) == []
