"""Per-topic notes (R23): `$set` appends, `update` replaces, `read` any topic of the session."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import bindparam, func, select, update

from shared.domain.limits import check_notes
from shared.infra.db.uow import UnitOfWork
from shared.notes.models import NotesDocument
from shared.topics.models import Topic

# Between appended entries: decisions are logged one after another, never overwritten.
ENTRY_SEPARATOR = "\n"


@dataclass(frozen=True)
class NotesView:
    topic_id: uuid.UUID
    content: str
    archived: bool


def _active_document(*, uow: UnitOfWork, topic_id: uuid.UUID) -> NotesDocument | None:
    return uow.session.scalar(
        select(NotesDocument)
        .where(NotesDocument.topic_id == topic_id, NotesDocument.status == "active")
        .with_for_update()
    )


def append_notes(*, uow: UnitOfWork, topic: Topic, content: str) -> NotesView:
    document = _active_document(uow=uow, topic_id=topic.id)
    if document is None:
        check_notes(content)
        document = NotesDocument(topic_id=topic.id, content=content, status="active")
        uow.session.add(document)
    else:
        appended = f"{document.content}{ENTRY_SEPARATOR}{content}" if document.content else content
        check_notes(appended)
        document.content = appended
    uow.session.flush()
    return NotesView(topic_id=topic.id, content=document.content, archived=False)


def replace_notes(*, uow: UnitOfWork, topic: Topic, content: str) -> NotesView:
    check_notes(content)
    document = _active_document(uow=uow, topic_id=topic.id)
    if document is None:
        document = NotesDocument(topic_id=topic.id, content=content, status="active")
        uow.session.add(document)
    else:
        document.content = content
    uow.session.flush()
    return NotesView(topic_id=topic.id, content=content, archived=False)


def read_notes(*, uow: UnitOfWork, topic_id: uuid.UUID) -> NotesView:
    """The active notes, or for a closed topic its latest archived document."""
    document = uow.session.scalar(
        select(NotesDocument)
        .where(NotesDocument.topic_id == topic_id)
        .order_by((NotesDocument.status == "active").desc(), NotesDocument.created_at.desc())
        .limit(1)
    )
    if document is None:
        return NotesView(topic_id=topic_id, content="", archived=False)
    return NotesView(
        topic_id=topic_id, content=document.content, archived=document.status == "archived"
    )


# Every summary runs these two (the worker's hot path): plain statements built once,
# not ORM-enabled ones, which cost several times the query in Python.
_ARCHIVE_ACTIVE = (
    update(NotesDocument)
    .where(NotesDocument.topic_id == bindparam("topic"), NotesDocument.status == "active")
    .values(status="archived", updated_at=func.now(), archived_at=func.now())
)
# The text of the topic's active notes (bind `topic`); a summary's snapshot reads it as
# a subquery of its one statement (shared/summaries/service.py).
ACTIVE_NOTES_TEXT = select(NotesDocument.content).where(
    NotesDocument.topic_id == bindparam("topic"), NotesDocument.status == "active"
)


def archive_notes(*, uow: UnitOfWork, topic_id: uuid.UUID) -> None:
    """R24: archive the topic's active notes; the caller stores the summary made from
    them in the same transaction. Archived notes stay stored and are never injected."""
    uow.session.connection().execute(_ARCHIVE_ACTIVE, {"topic": topic_id})


def active_notes_text(*, uow: UnitOfWork, topic_id: uuid.UUID) -> str | None:
    content: str | None = uow.session.connection().scalar(ACTIVE_NOTES_TEXT, {"topic": topic_id})
    return content


@dataclass(frozen=True)
class TopicNotes:
    active: NotesDocument | None
    archived: list[NotesDocument]


def topic_notes(*, uow: UnitOfWork, topic_id: uuid.UUID) -> TopicNotes:
    """All notes documents of a topic: the active one and the archived, newest first."""
    documents = uow.session.scalars(
        select(NotesDocument)
        .where(NotesDocument.topic_id == topic_id)
        .order_by(NotesDocument.created_at.desc())
        .limit(50)
    ).all()
    active = next((d for d in documents if d.status == "active"), None)
    return TopicNotes(active=active, archived=[d for d in documents if d.status == "archived"])
