"""Import an export (format.py) into an org: one short transaction per session.

A session's lines are read into memory (at most `Limits.import_session_bytes` of them: a
larger session is a 413) and written in one transaction when the next session line (or
the facts, or the end) arrives, so no transaction is open while the client sends: a
client that stalls holds no connection. A bad line rolls its own session back and ends
the import with an error naming the line, while the sessions before it stay imported,
and say so. A session already imported (its new id exists:
shared/portability/restore.py) is skipped whole, and agents and facts are written only
where they differ, so the same file twice changes nothing. No model is called:
summaries, memory states and facts come from the file, and nothing is enqueued for a
topic whose summary the file carries.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from sqlalchemy import select
from sqlalchemy.exc import DataError, IntegrityError

from shared.agents.models import AgentProfile
from shared.agents.service import put_agent
from shared.domain.errors import DomainError, Invalid, TooLarge
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
from shared.portability.admission import admit_import
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
    # The lines read but not written yet: a session's or a scope's facts. No transaction
    # is open while the next line is read (a client may take its time sending it); the
    # next kind of line writes them, in one short transaction.
    held: _Held | None = None
    number = 0
    try:
        for number, size, line in lines:
            if isinstance(line, fmt.Session):
                done = _write(new_uow, org_id, held, done)
                held = _Held(first=number, session=line)
            elif isinstance(line, fmt.Topic | fmt.Message | fmt.Fork | fmt.Note | fmt.Curation):
                if held is None or held.session is None:
                    raise Invalid(f"a {line.type} line outside a session")
                if number - held.first > MAX_IMPORT_SESSION_LINES:
                    raise Invalid(f"a session holds at most {MAX_IMPORT_SESSION_LINES} lines")
                if held.size + size > limits.import_session_bytes:
                    # One session, one transaction: written in parts, a session cut short
                    # by a failure would count as imported and be skipped the next time.
                    raise TooLarge(
                        f"the session of line {held.first} holds more than"
                        f" {limits.import_session_bytes} bytes of lines"
                    )
                held.add(number, size, line)
            elif isinstance(line, fmt.Fact):
                scope = Scope(org_id=org_id, agent_id=line.agent_id, user_id=line.user_id)
                # Facts may be written in parts: each version is written only where it
                # differs (import_fact_version), so a part written twice changes nothing.
                if (
                    held is None
                    or held.scope != scope
                    or (held.size + size > limits.import_session_bytes)
                ):
                    done = _write(new_uow, org_id, held, done)
                    held = _Held(first=number, scope=scope)
                held.add(number, size, line)
            else:
                done = _write(new_uow, org_id, held, done)
                held = None
                if isinstance(line, fmt.Header):
                    if number > 1:
                        raise Invalid("a second header line")
                    continue
                done = replace(done, agents=done.agents + _agent(new_uow, org_id, line))
        if number == 0:
            raise LineError(1, Invalid("the file is empty; the first line must be the header"))
        done = _write(new_uow, org_id, held, done)
    except LineError as exc:
        raise refused(exc.error, line=exc.line, before=done) from None
    except DomainError as exc:
        raise refused(exc, line=number, before=done) from None
    return done


@dataclass
class _Held:
    """Lines read and not written yet: a session's (`session`, its line) or one scope's
    facts (`scope`), with their numbers and how many bytes they took in the file."""

    first: int
    session: fmt.Session | None = None
    scope: Scope | None = None
    lines: list[tuple[int, Any]] = field(default_factory=list)
    size: int = 0

    def add(self, number: int, size: int, line: Any) -> None:
        self.lines.append((number, line))
        self.size += size


def _checked(lines: Iterator[tuple[int, bytes]], limits: Limits) -> Iterator[tuple[int, int, Any]]:
    """Each line parsed, with its size; the first must be the header of a format and
    version we read."""
    for number, raw in lines:
        try:
            line = parse(raw, limits=limits)
        except DomainError as exc:
            raise LineError(number, exc) from None
        if number == 1 and not isinstance(line, fmt.Header):
            raise LineError(number, Invalid("the first line must be the header"))
        yield number, len(raw), line


def _write(
    new_uow: Callable[[], UnitOfWork], org_id: uuid.UUID, held: _Held | None, done: Imported
) -> Imported:
    """Write what is held, if anything, in one transaction; what the import has written
    so far. A LineError names the line the database or a check refused."""
    if held is None:
        return done
    with new_uow() as uow:
        if held.scope is not None:
            facts = 0
            for number, line in held.lines:
                with _At(number):
                    facts += _fact(uow, held.scope, line)
            with _At(held.first):
                uow.commit()
            return replace(done, facts=done.facts + facts)
        assert held.session is not None
        restore = SessionRestore(uow=uow, org_id=org_id, line=held.session)
        if session_exists(uow=uow, session_id=restore.id):
            return replace(done, skipped_sessions=done.skipped_sessions + 1)
        restore.start()
        for number, line in held.lines:
            with _At(number):
                getattr(restore, line.type)(line)
        with _At(held.first):  # what settles the forward references is the session's
            restore.finish()
            uow.commit()
    return replace(
        done,
        sessions=done.sessions + 1,
        topics=done.topics + len(restore.topics),
        messages=done.messages + restore.messages,
    )


class _At:
    """A refusal inside, of a check or of the database, is a LineError naming the line."""

    def __init__(self, number: int) -> None:
        self.number = number

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if isinstance(exc, DomainError):
            raise LineError(self.number, exc) from None
        if isinstance(exc, DataError | IntegrityError):  # what the checks did not foresee
            problem = Invalid(f"the database refused it: {str(exc.orig).splitlines()[0]}")
            raise LineError(self.number, problem) from None


def _fact(uow: UnitOfWork, scope: Scope, line: fmt.Fact) -> int:
    return import_fact_version(
        uow=uow,
        scope=scope,
        key=line.key,
        value=line.value,
        valid_from=line.valid_from,
        valid_to=line.valid_to,
        changed_by=line.changed_by,
        removed_by=line.removed_by,
    )


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
    redis_client: redis.Redis | None = None,
) -> Imported:
    """Import `stream` in the format `source` names: an export ("driftless") or chat
    histories ("openai-chat", which need the agent and user they belong to). Counted
    among the org's imports when `redis_client` is given (the web's: TooBusy past
    `limits.imports_per_org`); the CLI's, an operator's, are not."""
    if source not in ("driftless", "openai-chat"):
        raise Invalid(f"format: {source!r} is not one of driftless, openai-chat")
    if source == "openai-chat" and (not agent_id or not user_id):
        raise Invalid("agentId, userId: a chat history is imported into one agent and user")
    slot = admit_import(redis_client=redis_client, org_id=org_id, limit=limits.imports_per_org)
    try:
        if source == "driftless":
            return import_export(new_uow=new_uow, org_id=org_id, stream=stream, limits=limits)
        return import_chat(
            new_uow=new_uow, org_id=org_id, agent_id=agent_id or "", user_id=user_id or "",
            stream=stream, limits=limits,
        )  # fmt: skip
    finally:
        slot.release()
