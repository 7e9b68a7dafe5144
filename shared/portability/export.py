"""Export: everything a scope holds, as the lines of the export format (format.py).

The lines stream from server-side cursors (`yield_per`), one per kind of row, each
ordered by session: the export walks the sessions and takes from every cursor the rows
of the session at hand, so a scope of any size costs a batch of rows per cursor in
memory, and one query per kind, not per session. Sessions go by id (any order keeps a
session's lines together); that is the order of the indexes the cursors read.

`open_export` is the web's and the CLI's entry: it admits the export (a slot of its
org, admission.py) before a line is read, and gives the connection back with its last.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeAlias

import redis
from pydantic.alias_generators import to_camel
from sqlalchemy import Engine, Select, Text, Uuid, cast, func, select, text
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.sql.elements import ColumnElement

from shared.agents.models import AgentProfile
from shared.curation.models import MemoryChange
from shared.facts.history import fact_lines
from shared.infra.db.uow import UnitOfWork
from shared.notes.models import NotesDocument
from shared.portability import format as fmt
from shared.portability.admission import Slot, admit_export
from shared.sessions.models import ChatSession, Message
from shared.topics.models import Fork, Topic

_Query: TypeAlias = "Select[*tuple[Any, ...]]"

# Rows fetched from each cursor at a time: a few hundred KiB of messages at most.
BATCH = 1_000
# What the web writes to its socket at a time.
CHUNK_CHARS = 64 * 1024


@dataclass(frozen=True)
class ExportScope:
    """An org, narrowed to an agent and/or a user when given."""

    org_id: uuid.UUID
    agent_id: str | None = None
    user_id: str | None = None


class ExportStream:
    """The lines of an admitted export (newline included); `close()` ends it early and
    frees its slot and connection, as a server does when its client goes away."""

    def __init__(self, lines: Iterator[tuple[str, str]], slot: Slot) -> None:
        self._lines, self._slot = lines, slot

    def records(self) -> Iterator[tuple[str, str]]:
        """(type, line) pairs: what a progress bar counts by."""
        try:
            yield from self._lines
        finally:
            self.close()

    def __iter__(self) -> Iterator[str]:
        """The lines joined into chunks of about CHUNK_CHARS: a server writes each item
        it is given to its socket, and a write a line would cost more than the line."""
        chunk: list[str] = []
        size = 0
        for _, line in self.records():
            chunk.append(line)
            size += len(line)
            if size >= CHUNK_CHARS:
                yield "".join(chunk)
                chunk, size = [], 0
        if chunk:
            yield "".join(chunk)

    def close(self) -> None:
        try:
            self._lines.close()  # type: ignore[attr-defined]
        finally:
            self._slot.release()


def open_export(
    *,
    new_uow: Callable[[], UnitOfWork],
    redis_client: redis.Redis | None,
    scope: ExportScope,
) -> ExportStream:
    """Admit the export (TooBusy past the org's limit) and return its lines, unread."""
    slot = admit_export(redis_client=redis_client, org_id=scope.org_id)
    return ExportStream(_in_own_transaction(new_uow, scope), slot)


def _in_own_transaction(
    new_uow: Callable[[], UnitOfWork], scope: ExportScope
) -> Iterator[tuple[str, str]]:
    # The connection is taken at the first line, not at admission: a response that is
    # never read holds a slot for its lease at most, and no connection.
    with new_uow() as uow:
        yield from export_records(uow=uow, scope=scope)


def export_records(*, uow: UnitOfWork, scope: ExportScope) -> Iterator[tuple[str, str]]:
    """(type, line) of every line of the scope's export, the header first."""
    _snapshot(uow)
    # Without the web's statement timeout: each fetch of a batch is quick, but the first
    # of a whole org's notes or curation rows sorts them all. What bounds an export is its
    # org's slots (admission.py), not a clock a large scope cannot beat. Times in UTC,
    # as the format writes them: nothing to convert line by line.
    uow.session.execute(text("SET LOCAL statement_timeout = 0; SET LOCAL timezone = 'UTC'"))
    header = fmt.Header(
        exported_at=datetime.now(UTC),
        scope=fmt.Scope(agent_id=scope.agent_id, user_id=scope.user_id),
    )
    yield "header", _line(header)
    for row in _stream(uow, _agents(scope)):
        yield "agent", _line(fmt.Agent.model_validate(row))
    yield from _sessions(uow, scope)
    for version in fact_lines(
        uow=uow, org_id=scope.org_id, agent_id=scope.agent_id, user_id=scope.user_id
    ):
        yield "fact", _line(fmt.Fact.model_validate(version, from_attributes=True))


def count_messages(*, uow: UnitOfWork, scope: ExportScope) -> int:
    """Messages the scope's export holds: a progress bar's length."""
    ids = _session_ids(scope)
    return int(uow.session.scalar(select(func.count()).where(Message.session_id.in_(ids))) or 0)


def _line(model: fmt.LineModel) -> str:
    return fmt.dump_line(model) + "\n"


# Each row becomes a dict named as the format names its fields (camelCase: the models
# look a field up by its alias first), and UUIDs come as text, which pydantic parses
# (in Rust) ten times faster than psycopg2 builds uuid.UUID objects (in Python).
_Column: TypeAlias = "ColumnElement[Any] | InstrumentedAttribute[Any]"


def _as(column: _Column, name: str | None = None) -> ColumnElement[Any]:
    label = name or to_camel(str(column.key))
    if isinstance(column.type, Uuid):
        return cast(column, Text).label(label)
    return column.label(label)


def _stream(uow: UnitOfWork, statement: _Query) -> Iterator[dict[str, Any]]:
    # On the Core connection, not the ORM session: the rows are plain columns, and the
    # ORM's loading would cost a tenth of the export's time for nothing.
    result = uow.session.connection().execute(statement.execution_options(yield_per=BATCH))
    keys = list(result.keys())
    return (dict(zip(keys, row, strict=True)) for rows in result.partitions() for row in rows)


def _fields(line: type[fmt.LineModel], table: Any, **columns: _Column) -> list[ColumnElement[Any]]:
    """The columns that fill `line`'s fields: the table's own of the same name, unless
    given. The format decides what is read, so a field added to it is exported."""
    names = [name for name in line.model_fields if name != "type"]
    return [
        _as(columns[name] if name in columns else getattr(table, name), to_camel(name))
        for name in names
    ]


def _agents(scope: ExportScope) -> _Query:
    statement = select(*_fields(fmt.Agent, AgentProfile)).where(AgentProfile.org_id == scope.org_id)
    # The profile belongs to the agent, not to any user: an export of one user of it
    # carries it (an import needs the agent), and erasing the user leaves it.
    if scope.agent_id is not None:
        statement = statement.where(AgentProfile.agent_id == scope.agent_id)
    return statement.order_by(AgentProfile.agent_id)


def _session_filter(scope: ExportScope) -> list[Any]:
    where: list[Any] = [ChatSession.org_id == scope.org_id]
    if scope.agent_id is not None:
        where.append(ChatSession.agent_id == scope.agent_id)
    if scope.user_id is not None:
        where.append(ChatSession.user_id == scope.user_id)
    return where


def _session_ids(scope: ExportScope) -> _Query:
    return select(ChatSession.id).where(*_session_filter(scope))


# Which session a row belongs to, for the walk: the topic's, for notes and curation rows
# (dropped before the line is made: it is not a field of theirs).
_WALK = "walkSessionId"


class _BySession:
    """A cursor ordered by session, read one session's rows at a time."""

    def __init__(self, rows: Iterator[dict[str, Any]], key: str = "sessionId") -> None:
        self._rows, self._key = rows, key
        self._next: dict[str, Any] | None = next(rows, None)

    def of(self, session_id: str) -> Iterator[dict[str, Any]]:
        key = self._key
        # Rows of a session the walk did not see (created after the sessions cursor
        # opened, outside a snapshot) sort before the one at hand: skipped, not waited
        # for. UUIDs as text sort as PostgreSQL sorts the UUIDs, byte by byte.
        while self._next is not None and self._next[key] < session_id:
            self._next = next(self._rows, None)
        while self._next is not None and self._next[key] == session_id:
            row, self._next = self._next, next(self._rows, None)
            if key == _WALK:
                del row[_WALK]
            yield row


def _sessions(uow: UnitOfWork, scope: ExportScope) -> Iterator[tuple[str, str]]:
    ids = _session_ids(scope)
    sessions = _stream(
        uow,
        select(*_fields(fmt.Session, ChatSession))
        .where(*_session_filter(scope))
        .order_by(ChatSession.id),
    )
    topics = _BySession(_stream(uow, _topics(ids)))
    forks = _BySession(_stream(uow, _forks(ids)))
    messages = _BySession(_stream(uow, _messages(ids)))
    notes = _BySession(_stream(uow, _notes(ids)), _WALK)
    curation = _BySession(_stream(uow, _curation(ids)), _WALK)
    for session in sessions:
        sid = session["id"]
        yield "session", _line(fmt.Session.model_validate(session))
        for row in topics.of(sid):
            yield "topic", _line(fmt.Topic.model_validate(row))
        for row in forks.of(sid):
            yield "fork", _line(fmt.Fork.model_validate(row))
        for row in messages.of(sid):
            yield "message", _line(fmt.Message.model_validate(row))
        for row in notes.of(sid):
            yield "note", _line(fmt.Note.model_validate(row))
        for row in curation.of(sid):
            yield "curation", _line(fmt.Curation.model_validate(row))


def _topics(ids: _Query) -> _Query:
    columns = _fields(fmt.Topic, Topic, summarized_through_message_id=Topic.summarized_through_id)
    return (
        select(*columns)
        .where(Topic.session_id.in_(ids))
        .order_by(Topic.session_id, Topic.created_at, Topic.id)
    )


def _forks(ids: _Query) -> _Query:
    return (
        select(*_fields(fmt.Fork, Fork))
        .where(Fork.session_id.in_(ids))
        .order_by(Fork.session_id, Fork.id)
    )


def _messages(ids: _Query) -> _Query:
    return (
        select(*_fields(fmt.Message, Message))
        .where(Message.session_id.in_(ids))
        .order_by(Message.session_id, Message.id)
    )


def _notes(ids: _Query) -> _Query:
    return (
        select(_as(Topic.session_id, _WALK), *_fields(fmt.Note, NotesDocument))
        .join(Topic, Topic.id == NotesDocument.topic_id)
        .where(Topic.session_id.in_(ids))
        .order_by(Topic.session_id, NotesDocument.created_at, NotesDocument.id)
    )


def _curation(ids: _Query) -> _Query:
    return (
        select(_as(Topic.session_id, _WALK), *_fields(fmt.Curation, MemoryChange))
        .join(Topic, Topic.id == MemoryChange.topic_id)
        .where(Topic.session_id.in_(ids))
        .order_by(Topic.session_id, MemoryChange.id)
    )


def _snapshot(uow: UnitOfWork) -> None:
    """Read the whole export from one snapshot (REPEATABLE READ): a message posted while
    it streams is in it with its session, or not at all. Only on a transaction of its
    own: one already begun (a test's savepoint) keeps its level."""
    bind = uow.session.get_bind()
    if not uow.session.in_transaction() and isinstance(bind, Engine):
        uow.session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
