"""Just-in-time summarization of a topic (R9–R14, R20, R24): the steps of a summary.

The jobs that summarize (shared/evaluations/: the summary job and the evaluation
pipeline) run these steps so that no transaction stays open during the LLM call
(seconds, or a timeout):

1. a snapshot of what to summarize: `take_snapshot` (the whole topic, unless its summary
   is current), `snapshot_of` (the whole topic) or `snapshot_before` (the messages
   before a fork's boundary);
2. the call: `ask_summary`;
3. a short write under `shared.memory.scope.lock_topic` that re-checks the watermark
   (`is_stored`: a duplicate got here first; `still_describes`: a fork changed the topic
   meanwhile) and then `apply_summary`.

A repeated job whose topic has not changed stops at the first step without an LLM call
(`is_summary_current`); a duplicate that raced the first one stops at the third without
writing.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, func, select
from sqlalchemy.orm import InstrumentedAttribute, aliased

from shared.curation.rules import summarizer_decides
from shared.curation.service import flags_of, record_change
from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import FALLBACKS, count_on_commit
from shared.llm.base import LLM, Completion, LLMError
from shared.llm.prompts import SUMMARY_PROMPT_VERSION
from shared.memory.scope import Scope
from shared.memory.versions import memory_changed
from shared.notes.service import ACTIVE_NOTES_TEXT, archive_notes
from shared.sessions.fork import messages_from
from shared.sessions.models import ChatSession, Message
from shared.summaries.rules import fallback_summary, parse_summary_answer
from shared.summaries.transcript import TopicSnapshot, read_transcript
from shared.topics.models import Topic
from shared.webhooks.events import TOPIC_SUMMARIZED, record_event, scope_data

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicHead:
    """The columns of a topic row that a summary snapshot is made from."""

    id: uuid.UUID
    status: str
    summary: str | None
    last_message_id: int | None
    summarized_through_id: int | None
    summary_prompt_version: str | None
    summary_model: str | None
    message_count: int
    tool_message_count: int

    @property
    def summary_pending(self) -> bool:
        return (
            self.last_message_id is not None and self.summarized_through_id != self.last_message_id
        )


@dataclass(frozen=True)
class Surroundings:
    """What a snapshot reads beside the transcript: the topic's first user message (the
    fallback title, R14), its active notes (R24), its rows up to the watermark
    (`still_describes`) and its org (whose LLM call the summary is, for accounting)."""

    first_user_message: str | None
    notes: str | None
    rows_through: int
    org_id: uuid.UUID


# The org of the topic bound as `topic` (its session's), by primary keys; an alias of
# topics, so it is never correlated with the topics row of an enclosing query.
_OWNER = aliased(Topic)
_ORG_OF_TOPIC = (
    select(ChatSession.org_id)
    .join(_OWNER, _OWNER.session_id == ChatSession.id)
    .where(_OWNER.id == bindparam("topic"))
)


def _surrounding_columns(through: ColumnElement[Any] | InstrumentedAttribute[Any]) -> list[Any]:
    """The `Surroundings` of the topic bound as `topic`, up to the message id `through`."""
    first_user_message = (
        select(Message.content)
        .where(Message.topic_id == bindparam("topic"), Message.role == "user")
        .order_by(Message.id)
        .limit(1)
    )
    return [
        first_user_message.scalar_subquery().label("first_user_message"),
        ACTIVE_NOTES_TEXT.scalar_subquery().label("notes"),
        _rows_up_to(through).scalar_subquery().label("rows_through"),
        _ORG_OF_TOPIC.scalar_subquery().label("org_id"),
    ]


def _rows_up_to(through: ColumnElement[Any] | InstrumentedAttribute[Any]) -> Select[Any]:
    """How many of the topic bound as `topic`'s messages have an id up to `through`."""
    return select(func.count()).where(Message.topic_id == bindparam("topic"), Message.id <= through)


# The summary job's reads, built once and run as plain rows: a worker runs them hundreds
# of times a second, and loading ORM entities cost several times the queries in Python.
_HEAD_FIELDS = tuple(TopicHead.__dataclass_fields__)
# The topic's head and its surroundings up to its newest message, in one round trip.
_HEAD_AND_SURROUNDINGS = select(
    *(getattr(Topic, name) for name in _HEAD_FIELDS),
    *_surrounding_columns(Topic.last_message_id),
).where(Topic.id == bindparam("topic"))
_SURROUNDINGS = select(*_surrounding_columns(bindparam("through")))
_ROWS_THROUGH = _rows_up_to(bindparam("through"))


def made_by(topic: Topic | TopicHead, model: str) -> bool:
    """The topic's summary came from the current prompt and `model`. A summary made before
    the model was recorded (NULL) counts as the current model's: only a change seen is
    one (an upgrade must not re-summarize every topic)."""
    return topic.summary_prompt_version == SUMMARY_PROMPT_VERSION and (
        topic.summary_model is None or topic.summary_model == model
    )


def is_summary_current(topic: Topic | TopicHead, model: str) -> bool:
    return not topic.summary_pending and made_by(topic, model)


def take_snapshot(*, uow: UnitOfWork, topic_id: uuid.UUID, model: str) -> TopicSnapshot | None:
    """What to summarize, or None when there is nothing to do."""
    row = uow.session.connection().execute(_HEAD_AND_SURROUNDINGS, {"topic": topic_id}).first()
    if row is None:
        return None
    topic = TopicHead(**{name: row._mapping[name] for name in _HEAD_FIELDS})
    if topic.last_message_id is None or is_summary_current(topic, model):
        return None
    surroundings = Surroundings(row.first_user_message, row.notes, row.rows_through, row.org_id)
    snapshot = snapshot_of(uow=uow, topic=topic, surroundings=surroundings)
    # Retention purged the messages: the summary made while they existed is the record.
    return snapshot if snapshot.request.lines else None


def snapshot_of(
    *, uow: UnitOfWork, topic: Topic | TopicHead, surroundings: Surroundings | None = None
) -> TopicSnapshot:
    """All of the topic's messages (an in-place refresh); `surroundings`, when the caller
    read them with the topic."""
    return _snapshot_through(
        uow=uow,
        topic=topic,
        through_id=topic.last_message_id or 0,
        total_messages=topic.message_count + topic.tool_message_count,
        message_count=topic.message_count,
        surroundings=surroundings,
    )


def snapshot_before(
    *, uow: UnitOfWork, topic_id: uuid.UUID, first_message_id: int
) -> TopicSnapshot | None:
    """What the prior topic's summary is made from when a fork moves the messages from
    `first_message_id` on: its messages before the boundary. None when the topic is no
    longer active or nothing would be left before the boundary."""
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
    return _snapshot_through(
        uow=uow,
        topic=topic,
        through_id=through_id,
        total_messages=topic.message_count + topic.tool_message_count - len(moving),
        message_count=topic.message_count - moved_ua,
    )


def _snapshot_through(
    *,
    uow: UnitOfWork,
    topic: Topic | TopicHead,
    through_id: int,
    total_messages: int,
    message_count: int,
    surroundings: Surroundings | None = None,
) -> TopicSnapshot:
    """The topic's messages up to `through_id` (all of them, or those before a fork)."""
    if surroundings is None:
        bounds = {"topic": topic.id, "through": through_id}
        row = uow.session.connection().execute(_SURROUNDINGS, bounds).one()
        surroundings = Surroundings(row.first_user_message, row.notes, row.rows_through, row.org_id)
    request = read_transcript(
        uow=uow,
        topic_id=topic.id,
        through_id=through_id,
        total_messages=total_messages,
        notes=surroundings.notes,
        previous_summary=topic.summary,
        org_id=surroundings.org_id,
    )
    return TopicSnapshot(
        request=request,
        last_message_id=through_id,
        message_count=message_count,
        first_user_message=surroundings.first_user_message,
        topic_status=topic.status,
        rows_through=surroundings.rows_through,
    )


def _rows_through(*, uow: UnitOfWork, topic_id: uuid.UUID, through_id: int) -> int:
    """The topic's messages up to `through_id` (an index range scan of ix_messages_topic_id_id)."""
    count = uow.session.connection().scalar(
        _ROWS_THROUGH, {"topic": topic_id, "through": through_id}
    )
    return int(count or 0)


def still_describes(*, uow: UnitOfWork, topic: Topic, snapshot: TopicSnapshot) -> bool:
    """Does `snapshot` still describe the row-locked `topic`?

    The LLM answers outside any transaction, so a fork may commit in between: it closes
    the topic and moves messages out, and an answer about the old contents written on
    top would rename, re-summarize and even promote the closed topic with a watermark
    past its last message. Messages only ever leave a topic, and never join one below
    its newest id, so equal counts up to the watermark mean the same messages.
    """
    return (
        topic.status == snapshot.topic_status
        and topic.last_message_id is not None
        and snapshot.last_message_id <= topic.last_message_id
        and _rows_through(uow=uow, topic_id=topic.id, through_id=snapshot.last_message_id)
        == snapshot.rows_through
    )


def ask_summary(llm: LLM, snapshot: TopicSnapshot) -> tuple[Completion | None, str | None]:
    """The LLM's answer, or None and the reason when the call failed entirely (R14)."""
    try:
        return llm.summarize(snapshot.request), None
    except LLMError as exc:
        log.warning("summarization call failed: %s", exc)
        return None, str(exc) or type(exc).__name__


def apply_summary(
    *,
    uow: UnitOfWork,
    topic: Topic,
    scope: Scope,
    snapshot: TopicSnapshot,
    completion: Completion | None,
    error: str | None,
    model: str,
) -> tuple[str, str | None]:
    """Store the summary on the (row-locked) topic: ("refresh" | "fallback", error).
    `model` is the one asked (as configured), recorded as the summary's maker."""
    parsed = parse_summary_answer(completion.text) if completion else None
    flags = flags_of(topic)
    shown_before = (topic.title, topic.summary)
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
        reason = "llm_error" if completion is None else "unusable_answer"
        count_on_commit(uow.session, FALLBACKS.labels("summarize", reason))
        error = error or "the answer was not a JSON object with a title and a summary"
    old_flags = flags_of(topic)
    record_change(
        uow=uow, topic=topic, scope=scope, new=flags, actor="summarizer", action="summarize"
    )
    # A new title or summary of a topic that stays in memory changes the memory block
    # too; a change of keep/deprecated was already handled by record_change.
    stays_in_memory = (flags.keep, flags.deprecated) == (old_flags.keep, old_flags.deprecated)
    shown_now = (topic.title, topic.summary)
    if stays_in_memory and (flags.keep or flags.deprecated) and shown_now != shown_before:
        memory_changed(uow=uow, scope=scope)
    topic.summarized_through_id = snapshot.last_message_id
    topic.summary_prompt_version = SUMMARY_PROMPT_VERSION
    # Even for a fallback: the model was asked, so a re-evaluation for a model change
    # does not ask it again (R14's fallback is final until the topic changes).
    topic.summary_model = model
    topic.summarized_at = func.now()
    if topic.status == "closed":
        # R24: notes are archived in the transaction that stores the summary made from them.
        archive_notes(uow=uow, topic_id=topic.id)
    record_event(
        uow,
        org_id=scope.org_id,
        type=TOPIC_SUMMARIZED,
        data={
            **scope_data(scope, topic),
            "title": topic.title,
            "summary": topic.summary,
            "summarySource": topic.summary_source,
            "status": topic.status,
            "memoryState": flags.state,
        },
    )
    return outcome, error


def is_stored(topic: Topic, snapshot: TopicSnapshot, model: str) -> bool:
    """A duplicate job already stored a summary of exactly this snapshot."""
    return topic.summarized_through_id == snapshot.last_message_id and made_by(topic, model)
