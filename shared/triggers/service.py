"""The debounce of exit triggers and the idle sweep (R27, R29), and R28's guard.

Every trigger goes through `debounce_trigger`; the one fire job of a burst asks
`fire_debounce` what to do; an evaluation that ran arms the guard with `guard_topic`.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Literal

from redis.exceptions import RedisError

from shared.infra.metrics import DEBOUNCE
from shared.infra.queue import EVALUATE_TOPIC, FIRE_DEBOUNCE, Job, JobQueue
from shared.triggers.debounce import Debouncer

log = logging.getLogger(__name__)

EvaluateStatus = Literal["scheduled", "coalesced", "suppressed", "dropped"]


def debounce_trigger(
    *,
    debouncer: Debouncer,
    queue: JobQueue,
    topic_id: uuid.UUID,
    last_message_id: int | None,
    trigger: str,
    org_id: uuid.UUID | None = None,
) -> EvaluateStatus:
    """Register a trigger; on the first of a burst, send the one fire job for it (which
    carries the org, whose turn its evaluation then waits: shared/infra/fair.py).

    Best effort by design (R29): Redis or the broker being down is `dropped`, logged,
    never an error for the caller.
    """
    status = _debounce(
        debouncer=debouncer, queue=queue, topic_id=topic_id, last_message_id=last_message_id,
        trigger=trigger, org_id=org_id,
    )  # fmt: skip
    DEBOUNCE.labels(trigger, status).inc()
    return status


def _debounce(
    *,
    debouncer: Debouncer,
    queue: JobQueue,
    topic_id: uuid.UUID,
    last_message_id: int | None,
    trigger: str,
    org_id: uuid.UUID | None,
) -> EvaluateStatus:
    try:
        result = debouncer.trigger(topic_id, last_message_id=last_message_id)
    except RedisError:
        log.warning("debounce unavailable; trigger %s for topic %s dropped", trigger, topic_id)
        return "dropped"
    if result.status != "scheduled":
        return result.status
    kwargs = {"topic_id": str(topic_id), "token": result.token, "trigger": trigger}
    if org_id is not None:
        kwargs["org"] = str(org_id)
    job = Job(FIRE_DEBOUNCE, kwargs, countdown=result.delay_ms / 1000)
    try:
        queue.send(job)
    except Exception:
        log.warning("broker unavailable; trigger %s for topic %s dropped", trigger, topic_id)
        with contextlib.suppress(RedisError):  # if not, the state expires on its own
            debouncer.forget(topic_id, result.token)
        return "dropped"
    return "scheduled"


@dataclass(frozen=True)
class Fired:
    """What the fire job of a burst does: its status, and the one job to send, if any."""

    status: Literal["fire", "wait", "stale"]
    send: Job | None


def fire_debounce(
    *, debouncer: Debouncer, topic_id: uuid.UUID, token: str, trigger: str, org: str | None = None
) -> Fired:
    """R27: the burst of `token` has been quiet long enough (or waited the maximum):
    evaluate now; a later trigger moved the deadline: look again when it is due; the
    burst is gone (fired by another worker, or forgotten): nothing. `org` rides along."""
    fired = debouncer.fire(topic_id, token)
    if fired.status == "fire":
        evaluation = {"topic_id": str(topic_id), "trigger": trigger}
        return Fired("fire", Job(EVALUATE_TOPIC, evaluation, org=org))
    if fired.status == "wait":
        kwargs = {"topic_id": str(topic_id), "token": token, "trigger": trigger}
        if org is not None:
            kwargs["org"] = org
        return Fired("wait", Job(FIRE_DEBOUNCE, kwargs, countdown=fired.remaining_ms / 1000))
    return Fired("stale", None)


def guard_topic(
    *, debouncer: Debouncer, topic_id: uuid.UUID | None, last_message_id: int | None, forked: bool
) -> None:
    """R28: after an evaluation of `topic_id` that saw `last_message_id`, suppress exit
    triggers for the topic until a newer message arrives. After a fork the active topic
    is a new one, with keys of its own: there is nothing to guard."""
    if forked or topic_id is None:
        return
    try:
        debouncer.mark_evaluated(topic_id, last_message_id=last_message_id)
    except RedisError:
        log.warning("could not arm the hasEvaluated guard of topic %s", topic_id)
