"""The evaluation pipeline (R30): drift detection, then a silent fork or an in-place refresh.

Read `evaluate_topic` top to bottom (`evaluation_job` is the job around it: the pipeline,
then R28's guard and the live event): every step is below it in this module, or one call
down into summarization (shared/summaries/service.py), the fork
(shared/sessions/fork.py) or the audit row (shared/evaluations/service.py).

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

import redis
from sqlalchemy import select

from shared.drift.rules import (
    EARLIER_CONTEXT,
    DriftDecision,
    build_drift_request,
    parse_drift_answer,
)
from shared.evaluations.service import record_evaluation
from shared.infra.db.uow import UnitOfWork
from shared.infra.live import publish
from shared.infra.metrics import FALLBACKS
from shared.llm.base import LLM, Completion, DriftRequest, LLMError, TranscriptLine
from shared.memory.scope import Scope, lock_topic
from shared.sessions.fork import fork_topic, record_fork
from shared.sessions.models import ChatSession, Message
from shared.summaries.service import (
    apply_summary,
    ask_summary,
    is_stored,
    is_summary_current,
    snapshot_before,
    snapshot_of,
    still_describes,
)
from shared.summaries.transcript import TopicSnapshot
from shared.topics.models import Topic
from shared.triggers.debounce import Debouncer
from shared.triggers.service import guard_topic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluationOutcome:
    topic_id: uuid.UUID  # the topic evaluated
    outcome: str  # fork | refresh | fallback | skipped
    active_topic_id: uuid.UUID | None = None  # after a fork: the new topic
    last_message_id: int | None = None  # what the evaluation saw (the hasEvaluated guard)
    session_id: uuid.UUID | None = None  # set when something was written


def evaluation_job(
    *,
    new_uow: Callable[[], UnitOfWork],
    llm: LLM,
    debouncer: Debouncer,
    live: redis.Redis,
    topic_id: uuid.UUID,
    trigger: str,
    scan_back: int,
) -> EvaluationOutcome:
    """The evaluate_topic job: the pipeline, then R28's guard and the live event."""
    outcome = evaluate_topic(
        new_uow=new_uow, llm=llm, topic_id=topic_id, trigger=trigger, scan_back=scan_back
    )
    forked = outcome.outcome == "fork"
    guard_topic(
        debouncer=debouncer, topic_id=outcome.active_topic_id,
        last_message_id=outcome.last_message_id, forked=forked,
    )  # fmt: skip
    if outcome.session_id is not None:
        kind = "fork" if forked else "evaluation"
        publish(live, outcome.session_id, kind, outcome.active_topic_id)
    return outcome


def evaluate_topic(
    *,
    new_uow: Callable[[], UnitOfWork],
    llm: LLM,
    topic_id: uuid.UUID,
    trigger: str,
    scan_back: int,
) -> EvaluationOutcome:
    """Evaluate the active topic: fork it on drift, refresh it otherwise (R30)."""
    job = _Job(
        topic_id=topic_id, trigger=trigger, started_at=dt.datetime.now(dt.UTC), model=llm.model
    )

    # 1. Anything to evaluate? A topic with nothing new since its summary costs no call.
    with new_uow() as uow:
        topic = uow.session.get(Topic, topic_id)
        if topic is None:
            return EvaluationOutcome(topic_id, "skipped")
        if (
            topic.status != "active"
            or topic.last_message_id is None
            or is_summary_current(topic, llm.model)
        ):
            # Closed (its summary is the close path's), empty, or unchanged: no LLM call.
            job.audit(uow, outcome="skipped", completions=[], llm_calls=0, error=None)
            last_seen = topic.last_message_id
            uow.commit()
            return EvaluationOutcome(topic_id, "skipped", topic_id, last_seen)
        request = _drift_request(uow=uow, topic=topic, scan_back=scan_back)

    # 2. Drift detection, outside any transaction.
    decision, drift_completion = _ask_drift(llm, request)

    # 3. What the summary is made from: the prior subject on drift, else the whole topic.
    with new_uow() as uow:
        if decision is not None:
            snapshot = snapshot_before(
                uow=uow, topic_id=topic_id, first_message_id=decision.first_message_id
            )
        else:
            topic = uow.session.get(Topic, topic_id)
            snapshot = None if topic is None else snapshot_of(uow=uow, topic=topic)
    if snapshot is None:
        return EvaluationOutcome(topic_id, "skipped")

    # 4. The summary call, outside any transaction.
    summary_completion, error = ask_summary(llm, snapshot)
    answers = _Answers(drift=drift_completion, summary=summary_completion, error=error)

    # 5. One short transaction applies the outcome.
    with new_uow() as uow:
        if decision is not None:
            return _apply_fork(
                uow=uow, job=job, decision=decision, snapshot=snapshot, answers=answers
            )
        return _apply_refresh(uow=uow, job=job, snapshot=snapshot, answers=answers)


@dataclass(frozen=True)
class _Job:
    """One evaluation of a topic, as its audit row names it."""

    topic_id: uuid.UUID
    trigger: str
    started_at: dt.datetime
    model: str  # the model asked, recorded as the summary's maker

    def audit(
        self,
        uow: UnitOfWork,
        *,
        outcome: str,
        completions: list[Completion | None],
        llm_calls: int,
        error: str | None,
    ) -> None:
        record_evaluation(
            uow=uow, topic_id=self.topic_id, trigger=self.trigger, outcome=outcome,
            completions=completions, llm_calls=llm_calls, error=error,
            started_at=self.started_at,
        )  # fmt: skip


@dataclass(frozen=True)
class _Answers:
    """What the two LLM calls answered (None: the call failed)."""

    drift: Completion | None
    summary: Completion | None
    error: str | None  # why the summary call failed

    @property
    def completions(self) -> list[Completion | None]:
        return [self.drift, self.summary]


def _apply_fork(
    *,
    uow: UnitOfWork,
    job: _Job,
    decision: DriftDecision,
    snapshot: TopicSnapshot,
    answers: _Answers,
) -> EvaluationOutcome:
    """Drift: move the new subject to a new active topic and summarize the prior one
    (R6, R24, R25), in this one transaction."""
    # fork_topic re-checks, under the session's and then the topic's lock (the writers'
    # order), that the topic is still active: a topic that is still active has lost no
    # message since the snapshot, as only a fork moves messages out and a fork closes
    # the topic it forks.
    forked = fork_topic(
        uow=uow, topic_id=job.topic_id, first_message_id=decision.first_message_id,
        new_title=decision.new_title,
    )  # fmt: skip
    if forked is None:  # the user closed the topic meanwhile: nothing to fork
        return EvaluationOutcome(job.topic_id, "skipped")
    _, error = apply_summary(
        uow=uow, topic=forked.prior, scope=Scope.of(forked.session), snapshot=snapshot,
        completion=answers.summary, error=answers.error, model=job.model,
    )  # fmt: skip
    record_fork(uow=uow, forked=forked, first_message_id=decision.first_message_id)
    new = forked.new
    outcome = EvaluationOutcome(job.topic_id, "fork", new.id, new.last_message_id, new.session_id)
    job.audit(uow, outcome="fork", completions=answers.completions, llm_calls=2, error=error)
    uow.commit()
    return outcome


def _apply_refresh(
    *, uow: UnitOfWork, job: _Job, snapshot: TopicSnapshot, answers: _Answers
) -> EvaluationOutcome:
    """No drift: refresh title, summary and keepInMemory in place."""
    locked = lock_topic(uow=uow, topic_id=job.topic_id)
    if locked is None:
        return EvaluationOutcome(job.topic_id, "skipped")
    topic, scope = locked
    if is_stored(topic, snapshot, job.model):  # a concurrent evaluation got here first
        return EvaluationOutcome(job.topic_id, "skipped", job.topic_id, snapshot.last_message_id)
    if not still_describes(uow=uow, topic=topic, snapshot=snapshot):
        # A fork committed while the LLM answered: the answer is about contents the
        # topic no longer has. Audited, never written.
        log.info("topic %s changed during its evaluation; answer discarded", job.topic_id)
        job.audit(
            uow, outcome="skipped", completions=answers.completions, llm_calls=2,
            error="the topic changed during the LLM calls; the answer was discarded",
        )  # fmt: skip
        uow.commit()
        return EvaluationOutcome(job.topic_id, "skipped")
    refresh, error = apply_summary(
        uow=uow, topic=topic, scope=scope, snapshot=snapshot, completion=answers.summary,
        error=answers.error, model=job.model,
    )  # fmt: skip
    outcome = EvaluationOutcome(
        job.topic_id, refresh, job.topic_id, snapshot.last_message_id, topic.session_id
    )
    job.audit(uow, outcome=refresh, completions=answers.completions, llm_calls=2, error=error)
    uow.commit()
    return outcome


def _drift_request(*, uow: UnitOfWork, topic: Topic, scan_back: int) -> DriftRequest:
    """The newest messages (the scan-back window and some earlier context) for R6, and
    the topic's org, whose call the detection is."""
    newest_first = uow.session.scalars(
        select(Message)
        .where(Message.topic_id == topic.id, Message.role != "tool")
        .order_by(Message.id.desc())
        .limit(scan_back + EARLIER_CONTEXT)
    ).all()
    recent = [
        TranscriptLine(id=m.id, role=m.role, content=m.content) for m in reversed(newest_first)
    ]
    org_id = uow.session.scalar(
        select(ChatSession.org_id).where(ChatSession.id == topic.session_id)
    )
    return build_drift_request(
        topic_title=topic.title, topic_summary=topic.summary, recent=recent, scan_back=scan_back,
        org_id=org_id,
    )  # fmt: skip


def _ask_drift(llm: LLM, request: DriftRequest) -> tuple[DriftDecision | None, Completion | None]:
    try:
        completion = llm.detect_drift(request)
    except LLMError as exc:
        log.warning("drift call failed, treating as no drift: %s", exc)
        # Counted when decided: the evaluation may still end without a write (skipped).
        FALLBACKS.labels("detect_drift", "llm_error").inc()
        return None, None
    return parse_drift_answer(completion.text, request), completion
