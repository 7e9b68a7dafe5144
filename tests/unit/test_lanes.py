"""Live work before bulk work: a campaign's jobs take the bulk lane (`llm_bulk`), every
other job its task's route; and only an LLM task has a bulk lane."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shared.infra.queue import (
    EVALUATE_TOPIC,
    LLM_BULK_QUEUE,
    RECONCILE,
    SUMMARIZE_TOPIC,
    CeleryJobQueue,
    Job,
)
from shared.reevaluations.selection import reevaluation_job


class Sender:
    """A Celery app's send_task, recorded."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send_task(self, name: str, **options: Any) -> None:
        self.sent.append((name, options))


@pytest.mark.parametrize(
    ("status", "task"), [("closed", SUMMARIZE_TOPIC), ("active", EVALUATE_TOPIC)]
)
def test_a_campaigns_jobs_are_sent_to_the_bulk_queue(status: str, task: str) -> None:
    sender = Sender()
    org_id = uuid.uuid4()
    job = reevaluation_job(
        topic_id=uuid.uuid4(), status=status, campaign_id=uuid.uuid4(), org_id=org_id
    )
    assert job.org == str(org_id)  # it takes the campaign's org's turn (shared/infra/fair.py)
    CeleryJobQueue(sender).send(job)
    [(name, options)] = sender.sent
    assert (name, options["queue"]) == (task, LLM_BULK_QUEUE)


@pytest.mark.parametrize(
    "job",
    [
        Job(SUMMARIZE_TOPIC, {"topic_id": "t", "trigger": "topic_closed"}),
        Job(EVALUATE_TOPIC, {"topic_id": "t", "trigger": "heartbeat"}),
        Job(EVALUATE_TOPIC, {"topic_id": "t", "trigger": "exit"}),
    ],
)
def test_live_jobs_go_where_their_task_is_routed(job: Job) -> None:
    sender = Sender()
    CeleryJobQueue(sender).send(job)
    [(_, options)] = sender.sent
    assert "queue" not in options  # TASK_ROUTES decides: `llm`


def test_only_an_llm_task_has_a_bulk_lane() -> None:
    with pytest.raises(ValueError, match="bulk lane"):
        Job(RECONCILE, lane="bulk")
