"""The evaluation pipeline (R30): drift detection, then a silent fork or an in-place refresh.

Like summarization, no transaction spans an LLM call: a snapshot, the drift call, a
snapshot of what will be summarized, the summary call, then one short transaction that
applies the outcome (the fork, the summary, the notes and the audit row together).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from shared.db.uow import UnitOfWork
from shared.drift.rules import (
    EARLIER_CONTEXT,
    DriftDecision,
    build_drift_request,
    parse_drift_answer,
)
from shared.llm.base import LLM, Completion, DriftRequest, LLMError, TranscriptLine
from shared.memory.scope import lock_topic
from shared.metrics import FALLBACKS
from shared.sessions.models import Message
from shared.summaries.service import (
    apply_summary,
    ask_summary,
    is_stored,
    is_summary_current,
    record_evaluation,
    snapshot_through,
    still_describes,
)
from shared.summaries.transcript import TopicSnapshot
from shared.topics.fork import fork_topic, messages_from, record_fork
from shared.topics.models import Topic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluationOutcome:
    topic_id: uuid.UUID  # the topic evaluated
    outcome: str  # fork | refresh | fallback | skipped
    active_topic_id: uuid.UUID | None = None  # after a fork: the new topic
    last_message_id: int | None = None  # what the evaluation saw (the hasEvaluated guard)
    session_id: uuid.UUID | None = None  # set when something was written


def _drift_request(*, uow: UnitOfWork, topic: Topic, scan_back: int) -> DriftRequest:
    newest_first = uow.session.scalars(
        select(Message)
        .where(Message.topic_id == topic.id, Message.role != "tool")
        .order_by(Message.id.desc())
        .limit(scan_back + EARLIER_CONTEXT)
    ).all()
    recent = [
        TranscriptLine(id=m.id, role=m.role, content=m.content) for m in reversed(newest_first)
    ]
    return build_drift_request(
        topic_title=topic.title, topic_summary=topic.summary, recent=recent, scan_back=scan_back
    )


def _ask_drift(llm: LLM, request: DriftRequest) -> tuple[DriftDecision | None, Completion | None]:
    try:
        completion = llm.detect_drift(request)
    except LLMError as exc:
        log.warning("drift call failed, treating as no drift: %s", exc)
        # Counted when decided: the evaluation may still end without a write (skipped).
        FALLBACKS.labels("detect_drift", "llm_error").inc()
        return None, None
    return parse_drift_answer(completion.text, request), completion


def _prior_snapshot(
    *, uow: UnitOfWork, topic_id: uuid.UUID, first_message_id: int
) -> TopicSnapshot | None:
    """What the prior topic's summary is made from: its messages before the boundary."""
    topic = uow.session.get(Topic, topic_id)
    if topic is None or topic.status != "active":
        return None
    moving = messages_from(uow=uow, topic_id=topic.id, first_message_id=first_message_id)
    through_id = uow.session.scalar(
        select(Message.id)
        .where(Message.topic_id == topic.id, Message.id < first_message_id)
        .order_by(Message.id.desc())
        .limit(1)
    )
    if through_id is None:
        return None
    moved_ua = sum(1 for _, role in moving if role != "tool")
    return snapshot_through(
        uow=uow,
        topic=topic,
        through_id=through_id,
        total_messages=topic.message_count + topic.tool_message_count - len(moving),
        message_count=topic.message_count - moved_ua,
    )


def evaluate_topic(
    *,
    new_uow: Callable[[], UnitOfWork],
    llm: LLM,
    topic_id: uuid.UUID,
    trigger: str,
    scan_back: int,
) -> EvaluationOutcome:
    """Evaluate the active topic: fork it on drift, refresh it otherwise (R30)."""
    started_at = dt.datetime.now(dt.UTC)
    with new_uow() as uow:
        topic = uow.session.get(Topic, topic_id)
        if topic is None:
            return EvaluationOutcome(topic_id, "skipped")
        if topic.status != "active" or topic.last_message_id is None or is_summary_current(topic):
            # Closed (its summary is the close path's), empty, or unchanged: no LLM call.
            record_evaluation(
                uow=uow, topic_id=topic_id, trigger=trigger, outcome="skipped",
                completions=[], llm_calls=0, error=None, started_at=started_at,
            )  # fmt: skip
            last_seen = topic.last_message_id
            uow.commit()
            return EvaluationOutcome(topic_id, "skipped", topic_id, last_seen)
        request = _drift_request(uow=uow, topic=topic, scan_back=scan_back)

    decision, drift_completion = _ask_drift(llm, request)
    with new_uow() as uow:
        if decision is not None:
            snapshot = _prior_snapshot(
                uow=uow, topic_id=topic_id, first_message_id=decision.first_message_id
            )
        else:
            topic = uow.session.get(Topic, topic_id)
            snapshot = None if topic is None else snapshot_through(
                uow=uow, topic=topic, through_id=topic.last_message_id or 0,
                total_messages=topic.message_count + topic.tool_message_count,
                message_count=topic.message_count,
            )  # fmt: skip
    if snapshot is None:
        return EvaluationOutcome(topic_id, "skipped")
    summary_completion, error = ask_summary(llm, snapshot)
    completions = [drift_completion, summary_completion]

    with new_uow() as uow:
        if decision is not None:
            # fork_topic re-checks, under the session's and then the topic's lock (the
            # writers' order), that the topic is still active: a topic that is still
            # active has lost no message since the snapshot, as only a fork moves
            # messages out and a fork closes the topic it forks.
            forked = fork_topic(
                uow=uow, topic_id=topic_id, first_message_id=decision.first_message_id,
                new_title=decision.new_title,
            )  # fmt: skip
            if forked is None:  # the user closed the topic meanwhile: nothing to fork
                return EvaluationOutcome(topic_id, "skipped")
            _, error = apply_summary(
                uow=uow, topic=forked.prior, scope=forked.scope, snapshot=snapshot,
                completion=summary_completion, error=error,
            )  # fmt: skip
            record_fork(uow=uow, forked=forked, first_message_id=decision.first_message_id)
            outcome = EvaluationOutcome(
                topic_id, "fork", forked.new.id, forked.new.last_message_id, forked.new.session_id
            )
        else:
            locked = lock_topic(uow=uow, topic_id=topic_id)
            if locked is None:
                return EvaluationOutcome(topic_id, "skipped")
            topic, scope = locked
            if is_stored(topic, snapshot):  # a concurrent evaluation got here first
                return EvaluationOutcome(topic_id, "skipped", topic_id, snapshot.last_message_id)
            if not still_describes(uow=uow, topic=topic, snapshot=snapshot):
                # A fork committed while the LLM answered: the answer is about contents
                # the topic no longer has. Audited, never written.
                log.info("topic %s changed during its evaluation; answer discarded", topic_id)
                record_evaluation(
                    uow=uow, topic_id=topic_id, trigger=trigger, outcome="skipped",
                    completions=completions, llm_calls=2, started_at=started_at,
                    error="the topic changed during the LLM calls; the answer was discarded",
                )  # fmt: skip
                uow.commit()
                return EvaluationOutcome(topic_id, "skipped")
            refresh, error = apply_summary(
                uow=uow, topic=topic, scope=scope, snapshot=snapshot,
                completion=summary_completion, error=error,
            )  # fmt: skip
            outcome = EvaluationOutcome(
                topic_id, refresh, topic_id, snapshot.last_message_id, topic.session_id
            )
        record_evaluation(
            uow=uow, topic_id=topic_id, trigger=trigger, outcome=outcome.outcome,
            completions=completions, llm_calls=2, error=error, started_at=started_at,
        )  # fmt: skip
        uow.commit()
    return outcome
