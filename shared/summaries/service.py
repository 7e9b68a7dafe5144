"""Just-in-time summarization of a topic (R9–R14, R20, R24).

Three steps, so that no transaction stays open during the LLM call (seconds, or a
timeout): a snapshot of the topic, the call, and a short locked write that re-checks
the watermark. A repeated job whose topic has not changed stops at the first step
without an LLM call; a duplicate that raced the first one stops at the third without
writing.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select, update

from shared.curation.rules import summarizer_decides
from shared.curation.service import flags_of, record_change
from shared.db.uow import UnitOfWork
from shared.evaluations.models import Evaluation
from shared.llm.base import LLM, Completion, LLMError
from shared.llm.prompts import SUMMARY_PROMPT_VERSION
from shared.memory.scope import Scope
from shared.notes.models import NotesDocument
from shared.notes.service import active_notes_text
from shared.sessions.models import ChatSession, Message
from shared.summaries.rules import fallback_summary, parse_summary_answer
from shared.summaries.transcript import TopicSnapshot, read_transcript
from shared.topics.models import Topic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SummaryOutcome:
    topic_id: uuid.UUID
    outcome: str  # refresh | fallback | skipped
    keep_in_memory: bool | None = None


def _is_current(topic: Topic) -> bool:
    return not topic.summary_pending and topic.summary_prompt_version == SUMMARY_PROMPT_VERSION


def take_snapshot(*, uow: UnitOfWork, topic_id: uuid.UUID) -> TopicSnapshot | None:
    """What to summarize, or None when there is nothing to do."""
    topic = uow.session.get(Topic, topic_id)
    if topic is None or topic.last_message_id is None or _is_current(topic):
        return None
    first_user_message = uow.session.scalar(
        select(Message.content)
        .where(Message.topic_id == topic.id, Message.role == "user")
        .order_by(Message.id)
        .limit(1)
    )
    request = read_transcript(
        uow=uow,
        topic_id=topic.id,
        through_id=topic.last_message_id,
        total_messages=topic.message_count + topic.tool_message_count,
        notes=active_notes_text(uow=uow, topic_id=topic.id),
        previous_summary=topic.summary,
    )
    return TopicSnapshot(
        request=request,
        last_message_id=topic.last_message_id,
        message_count=topic.message_count,
        first_user_message=first_user_message,
    )


def _ask(llm: LLM, snapshot: TopicSnapshot) -> tuple[Completion | None, str | None]:
    try:
        return llm.summarize(snapshot.request), None
    except LLMError as exc:
        log.warning("summarization call failed: %s", exc)
        return None, str(exc) or type(exc).__name__


def store_summary(
    *,
    uow: UnitOfWork,
    topic_id: uuid.UUID,
    snapshot: TopicSnapshot,
    completion: Completion | None,
    error: str | None,
    trigger: str,
    started_at: dt.datetime,
) -> SummaryOutcome:
    """Write the summary under the topic's row lock, unless a duplicate job got there first."""
    row = uow.session.execute(
        select(Topic, ChatSession)
        .join(ChatSession, ChatSession.id == Topic.session_id)
        .where(Topic.id == topic_id)
        .with_for_update(of=Topic)
    ).first()
    if row is None:
        return SummaryOutcome(topic_id, "skipped")
    topic, session = row
    if (
        topic.summarized_through_id == snapshot.last_message_id
        and topic.summary_prompt_version == SUMMARY_PROMPT_VERSION
    ):
        return SummaryOutcome(topic_id, "skipped", topic.keep_in_memory)

    parsed = parse_summary_answer(completion.text) if completion else None
    flags = flags_of(topic)
    if parsed is not None:
        topic.title, topic.summary, topic.summary_source = parsed.title, parsed.summary, "llm"
        flags = summarizer_decides(
            flags,
            include_in_memory=parsed.include_in_memory,
            message_count=snapshot.message_count,
        )
        outcome = "refresh"
    else:
        # R14: a failed or unusable answer never promotes: the flags stay as they are
        # (false for a topic no model has judged yet). An earlier LLM summary is better
        # than a first-message fallback, so it stays.
        if topic.summary_source != "llm":
            topic.title, topic.summary = fallback_summary(snapshot.first_user_message)
            topic.summary_source = "fallback"
        outcome = "fallback"
        error = error or "the answer was not a JSON object with a title and a summary"
    scope = Scope(org_id=session.org_id, agent_id=session.agent_id, user_id=session.user_id)
    record_change(
        uow=uow, topic=topic, scope=scope, new=flags, actor="summarizer", action="summarize"
    )
    topic.summarized_through_id = snapshot.last_message_id
    topic.summary_prompt_version = SUMMARY_PROMPT_VERSION
    topic.summarized_at = func.now()
    if topic.status == "closed":
        # R24: notes are archived in the transaction that stores the summary made from them.
        uow.session.execute(
            update(NotesDocument)
            .where(NotesDocument.topic_id == topic.id, NotesDocument.status == "active")
            .values(status="archived", archived_at=func.now())
        )
    uow.session.add(
        Evaluation(
            topic_id=topic.id,
            trigger=trigger,
            outcome=outcome,
            llm_calls=1,
            prompt_tokens=completion.usage.prompt_tokens if completion else 0,
            completion_tokens=completion.usage.completion_tokens if completion else 0,
            model=completion.model if completion else None,
            error=error,
            started_at=started_at,
            finished_at=dt.datetime.now(dt.UTC),
        )
    )
    return SummaryOutcome(topic_id, outcome, flags.keep)


def summarize_topic(
    *, new_uow: Callable[[], UnitOfWork], llm: LLM, topic_id: uuid.UUID, trigger: str
) -> SummaryOutcome:
    """Summarize the topic with one LLM call, unless its summary is already current."""
    started_at = dt.datetime.now(dt.UTC)
    with new_uow() as uow:
        snapshot = take_snapshot(uow=uow, topic_id=topic_id)
    if snapshot is None:
        return SummaryOutcome(topic_id, "skipped")
    completion, error = _ask(llm, snapshot)
    with new_uow() as uow:
        outcome = store_summary(
            uow=uow,
            topic_id=topic_id,
            snapshot=snapshot,
            completion=completion,
            error=error,
            trigger=trigger,
            started_at=started_at,
        )
        uow.commit()
    return outcome
