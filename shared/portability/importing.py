"""Import an export (format.py) into an org: one transaction per session, line by line.

A session's lines are written as they arrive and committed at the next session line (or
the facts, or the end): a bad line rolls its own session back and ends the import with
an error naming the line, while the sessions before it stay imported, and say so. A
session already imported (its new id exists: shared/portability/restore.py) is skipped
whole, and agents and facts are written only where they differ, so the same file twice
changes nothing. No model is called: summaries, memory states and facts come from the
file, and nothing is enqueued for a topic whose summary the file carries.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import DataError, IntegrityError

from shared.agents.models import AgentProfile
from shared.agents.service import put_agent
from shared.domain.errors import DomainError, Invalid
from shared.domain.limits import (
    MAX_FACT_KEY_CHARS,
    MAX_IMPORT_LINE_BYTES,
    MAX_IMPORT_SESSION_LINES,
    MAX_SCOPE_ID_CHARS,
    Limits,
)
from shared.domain.storable import unstorable_at
from shared.facts.history import import_fact_version
from shared.infra.db.uow import UnitOfWork
from shared.memory.scope import Scope
from shared.portability import format as fmt
from shared.portability.chat import import_chat
from shared.portability.lines import (
    Imported,
    LineError,
    LineSource,
    MalformedLine,
    check_depth,
    numbered_lines,
    refused,
)
from shared.portability.restore import SessionRestore, session_exists

# Escapes of what PostgreSQL cannot store (NUL, a lone surrogate): a line holding one is
# checked field by field, every other line costs one search.
_UNSTORABLE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
# Columns of a bounded width (varchar), by line type: a longer value is a 422 naming the
# field, not a database error. (attribute, field, characters)
_SCOPE_WIDTHS = (
    ("agent_id", "agentId", MAX_SCOPE_ID_CHARS),
    ("user_id", "userId", MAX_SCOPE_ID_CHARS),
)
_WIDTHS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "agent": _SCOPE_WIDTHS[:1],
    "session": _SCOPE_WIDTHS,
    "fact": (*_SCOPE_WIDTHS, ("key", "key", MAX_FACT_KEY_CHARS)),
    "message": (("tool_name", "toolName", 200), ("tool_call_id", "toolCallId", 200)),
    "topic": (("memory_state_set_by", "memoryStateSetBy", 16),
              ("summary_prompt_version", "summaryPromptVersion", 32)),
    "curation": (("action", "action", 32),),
}  # fmt: skip


def parse(raw: bytes, *, limits: Limits) -> Any:
    """One line as its model (format.py), or a DomainError saying what is wrong with it."""
    check_depth(raw, limits=limits)
    try:
        line = fmt.parse_line(raw)
    except Invalid:
        try:
            json.loads(raw)
        except ValueError as exc:  # not JSON at all: a 400, as a body that is not JSON
            raise MalformedLine(f"not JSON: {exc}") from None
        raise
    if _UNSTORABLE_ESCAPE.search(raw):
        where = unstorable_at(json.loads(raw), "")
        if where is not None:
            raise Invalid(f"{where}: a NUL character or an unpaired surrogate cannot be stored")
    for attribute, name, width in _WIDTHS.get(line.type, ()):
        value = getattr(line, attribute)
        if value is not None and len(value) > width:
            raise Invalid(f"{name}: longer than {width} characters")
    return line


def import_export(
    *,
    new_uow: Callable[[], UnitOfWork],
    org_id: uuid.UUID,
    stream: LineSource,
    limits: Limits,
) -> Imported:
    """Import the export read from `stream` into `org_id`; DomainError naming the line."""
    done = Imported()
    lines = _checked(numbered_lines(stream, max_bytes=MAX_IMPORT_LINE_BYTES), limits)
    # The unit of work being filled: a session's (with its restore and first line) or a
    # scope's facts. Only one is open at a time; the next kind of line commits it.
    current: _Open | None = None
    number = 0
    try:
        for number, line in lines:
            if isinstance(line, fmt.Session):
                done = _finish(current, done)
                current = _begin(new_uow, org_id, line, number)
            elif isinstance(line, fmt.Topic | fmt.Message | fmt.Fork | fmt.Note | fmt.Curation):
                if current is None or current.scope is not None:
                    raise Invalid(f"a {line.type} line outside a session")
                if number - current.first > MAX_IMPORT_SESSION_LINES:
                    raise Invalid(f"a session holds at most {MAX_IMPORT_SESSION_LINES} lines")
                if current.restore is not None:  # None: imported before, its lines only read
                    getattr(current.restore, line.type)(line)
            elif isinstance(line, fmt.Fact):
                scope = Scope(org_id=org_id, agent_id=line.agent_id, user_id=line.user_id)
                if current is None or current.scope != scope:
                    done = _finish(current, done)
                    current = _Open(uow=new_uow().__enter__(), first=number, scope=scope)
                current.facts += import_fact_version(
                    uow=current.uow,
                    scope=scope,
                    key=line.key,
                    value=line.value,
                    valid_from=line.valid_from,
                    valid_to=line.valid_to,
                    changed_by=line.changed_by,
                    removed_by=line.removed_by,
                )
            else:
                done = _finish(current, done)
                current = None
                if isinstance(line, fmt.Header):
                    if number > 1:
                        raise Invalid("a second header line")
                    continue
                done = replace(done, agents=done.agents + _agent(new_uow, org_id, line))
        if number == 0:
            raise LineError(1, Invalid("the file is empty; the first line must be the header"))
        done = _finish(current, done)
        current = None
    except LineError as exc:
        _abandon(current)
        raise refused(exc.error, line=exc.line, before=done) from None
    except DomainError as exc:
        _abandon(current)
        raise refused(exc, line=number, before=done) from None
    except (DataError, IntegrityError) as exc:  # what the checks above did not foresee
        _abandon(current)
        problem = Invalid(f"the database refused it: {str(exc.orig).splitlines()[0]}")
        raise refused(problem, line=number, before=done) from None
    except BaseException:
        _abandon(current)
        raise
    return done


@dataclass
class _Open:
    """The open unit of work: a session's (`restore` None when it was imported before,
    its lines only read) or one scope's facts (`scope`)."""

    uow: UnitOfWork
    first: int
    restore: SessionRestore | None = None
    scope: Scope | None = None
    facts: int = 0


def _checked(lines: Iterator[tuple[int, bytes]], limits: Limits) -> Iterator[tuple[int, Any]]:
    """Each line parsed; the first must be the header of a format and version we read."""
    for number, raw in lines:
        try:
            line = parse(raw, limits=limits)
        except DomainError as exc:
            raise LineError(number, exc) from None
        if number == 1 and not isinstance(line, fmt.Header):
            raise LineError(number, Invalid("the first line must be the header"))
        yield number, line


def _begin(
    new_uow: Callable[[], UnitOfWork], org_id: uuid.UUID, line: fmt.Session, number: int
) -> _Open:
    uow = new_uow().__enter__()
    restore = SessionRestore(uow=uow, org_id=org_id, line=line)
    if session_exists(uow=uow, session_id=restore.id):
        return _Open(uow=uow, first=number)
    restore.start()
    return _Open(uow=uow, first=number, restore=restore)


def _finish(current: _Open | None, done: Imported) -> Imported:
    """Commit what is open, if anything; what the import has written so far."""
    if current is None:
        return done
    try:
        if current.scope is not None:
            current.uow.commit()
            return replace(done, facts=done.facts + current.facts)
        restore = current.restore
        if restore is None:
            return replace(done, skipped_sessions=done.skipped_sessions + 1)
        try:
            restore.finish()
        except DomainError as exc:
            raise LineError(current.first, exc) from None
        current.uow.commit()
        return replace(
            done,
            sessions=done.sessions + 1,
            topics=done.topics + len(restore.topics),
            messages=done.messages + restore.messages,
        )
    finally:
        current.uow.__exit__(None, None, None)


def _abandon(current: _Open | None) -> None:
    """Roll back what is open (closing the unit of work does)."""
    if current is not None:
        current.uow.__exit__(None, None, None)


def _agent(new_uow: Callable[[], UnitOfWork], org_id: uuid.UUID, line: fmt.Agent) -> int:
    """The profile as the file has it; 0 when it is so already (a re-import writes nothing)."""
    with new_uow() as uow:
        held = uow.session.scalar(
            select(AgentProfile).where(
                AgentProfile.org_id == org_id, AgentProfile.agent_id == line.agent_id
            )
        )
        if held is not None and (held.soul, held.skills, held.tools) == (
            line.soul,
            line.skills,
            line.tools,
        ):
            return 0
        put_agent(
            uow=uow,
            org_id=org_id,
            agent_id=line.agent_id,
            soul=line.soul,
            skills=line.skills,
            tools=line.tools,
        )
        uow.commit()
    return 1


def import_stream(
    *,
    new_uow: Callable[[], UnitOfWork],
    org_id: uuid.UUID,
    stream: LineSource,
    limits: Limits,
    source: str = "driftless",
    agent_id: str | None = None,
    user_id: str | None = None,
) -> Imported:
    """Import `stream` in the format `source` names: an export ("driftless") or chat
    histories ("openai-chat", which need the agent and user they belong to)."""
    if source == "driftless":
        return import_export(new_uow=new_uow, org_id=org_id, stream=stream, limits=limits)
    if source != "openai-chat":
        raise Invalid(f"format: {source!r} is not one of driftless, openai-chat")
    if not agent_id or not user_id:
        raise Invalid("agentId, userId: a chat history is imported into one agent and user")
    return import_chat(
        new_uow=new_uow, org_id=org_id, agent_id=agent_id, user_id=user_id,
        stream=stream, limits=limits,
    )  # fmt: skip
