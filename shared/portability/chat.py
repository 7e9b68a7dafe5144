"""History from elsewhere: OpenAI chat messages, one JSON array per session a line.

Each line becomes a session of the given agent and user whose messages go into one
topic, closed, whose summary is then made in the bulk lane (shared/infra/queue.py), so a
big import never delays live work; a new empty topic is the session's active one (R4).
system and developer messages are instructions to a model, not the conversation: they
are skipped. A user's or assistant's `name` (who spoke) is kept, checked as a post's
is. An assistant's tool calls are stored as `tool` messages (R7), one a call,
named by the function and carrying its arguments; a tool's answer is a `tool` message
with its call's id. A session's id is a uuid5 of the org and the sha256 of the line's
canonical JSON: the same history imported twice is found and skipped.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import func, insert, text

from shared.domain.errors import DomainError, Invalid
from shared.domain.limits import (
    MAX_IMPORT_CHAT_LINE_BYTES,
    MAX_IMPORT_SESSION_LINES,
    MAX_SCOPE_ID_CHARS,
    Limits,
    check_message_content,
    check_message_name,
)
from shared.domain.storable import unstorable_at
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import SUMMARIZE_TOPIC, Job
from shared.portability.lines import (
    Imported,
    LineError,
    LineSource,
    load_json,
    numbered_lines,
    refused,
)
from shared.portability.message_rows import insert_messages
from shared.portability.restore import NAMESPACE, session_exists
from shared.sessions.models import ChatSession
from shared.topics.models import Topic, history_topic_id

SKIPPED_ROLES = ("system", "developer")
_Row = tuple[str, str, str | None, str | None, str | None]


def import_chat(
    *,
    new_uow: Callable[[], UnitOfWork],
    org_id: uuid.UUID,
    agent_id: str,
    user_id: str,
    stream: LineSource,
    limits: Limits,
) -> Imported:
    """Import chat histories (one array of messages a line) as sessions of agent + user."""
    for name, value in (("agentId", agent_id), ("userId", user_id)):
        if not 1 <= len(value) <= MAX_SCOPE_ID_CHARS:
            raise Invalid(f"{name}: must be 1 to {MAX_SCOPE_ID_CHARS} characters")
    done = Imported()
    try:
        for number, raw in numbered_lines(stream, max_bytes=MAX_IMPORT_CHAT_LINE_BYTES):
            try:
                written = _import_line(new_uow, org_id, agent_id, user_id, raw, limits)
            except DomainError as exc:
                raise refused(exc, line=number, before=done) from None
            done = replace(
                done,
                sessions=done.sessions + (written > 0),
                skipped_sessions=done.skipped_sessions + (written == 0),
                topics=done.topics + (written > 0),
                messages=done.messages + written,
            )
    except LineError as exc:
        raise refused(exc.error, line=exc.line, before=done) from None
    return done


def _import_line(
    new_uow: Callable[[], UnitOfWork],
    org_id: uuid.UUID,
    agent_id: str,
    user_id: str,
    raw: bytes,
    limits: Limits,
) -> int:
    """One history as one session, in one transaction: its messages, 0 if imported before."""
    history = load_json(raw, limits=limits)
    rows = chat_rows(history)
    session_id = uuid.uuid5(NAMESPACE, f"{org_id}:{_digest(history)}")
    with new_uow() as uow:
        if session_exists(uow=uow, session_id=session_id):
            return 0
        _write(uow, org_id, agent_id, user_id, session_id, rows)
        uow.commit()
    return len(rows)


def _digest(history: Any) -> str:
    canonical = json.dumps(history, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", errors="surrogatepass")).hexdigest()


def chat_rows(history: Any) -> list[_Row]:
    """The stored messages of one chat history (role, content, name, tool name, call id)."""
    if not isinstance(history, list):
        raise Invalid("a line is a JSON array of chat messages")
    rows: list[_Row] = []
    for index, message in enumerate(history):
        rows.extend(_rows_of(message, f"[{index}]"))
        if len(rows) > MAX_IMPORT_SESSION_LINES:
            raise Invalid(f"a session holds at most {MAX_IMPORT_SESSION_LINES} messages")
    if not rows:
        raise Invalid("no user, assistant or tool message to import")
    return rows


def _rows_of(message: Any, at: str) -> list[_Row]:
    if not isinstance(message, dict):
        raise Invalid(f"{at}: a chat message is an object")
    where = unstorable_at(message, at)
    if where is not None:
        raise Invalid(f"{where}: a NUL character or an unpaired surrogate cannot be stored")
    role = message.get("role")
    if role in SKIPPED_ROLES:
        return []
    content = _text(message.get("content"), f"{at}.content")
    if role in ("user", "assistant"):
        name = message.get("name")  # who spoke: OpenAI's own field, checked as a post's
        check_message_name(name, role=role, field=f"{at}.name")
    if role == "user":
        return [("user", content, name, None, None)] if content else []
    if role == "assistant":
        rows: list[_Row] = [("assistant", content, name, None, None)] if content else []
        return rows + [_tool_call(call, f"{at}.tool_calls[{i}]") for i, call in enumerate(
            _list(message.get("tool_calls"), f"{at}.tool_calls"))]  # fmt: skip
    if role in ("tool", "function"):
        name = _short(message.get("name"), f"{at}.name")
        call_id = _short(message.get("tool_call_id"), f"{at}.tool_call_id")
        return [("tool", content, None, name, call_id)]
    raise Invalid(f"{at}.role: {role!r} is not one of system, developer, user, assistant, tool")


def _text(content: Any, at: str) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        content = "\n".join(p for p in parts if isinstance(p, str))
    if not isinstance(content, str):
        raise Invalid(f"{at}: a string or a list of content parts")
    try:
        check_message_content(content)
    except Invalid as exc:
        raise Invalid(f"{at}: {exc.message}") from None
    return content


def _list(value: Any, at: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Invalid(f"{at}: a list")
    return value


def _short(value: Any, at: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 200:
        raise Invalid(f"{at}: a string of at most 200 characters")
    return value


def _tool_call(call: Any, at: str) -> _Row:
    """One call of an assistant's tool_calls, stored as the tool's `tool` message (R7)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise Invalid(f"{at}.function: an object with name and arguments")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    name = _short(function.get("name"), f"{at}.function.name")
    call_id = _short(call.get("id"), f"{at}.id")
    return ("tool", _text(arguments, f"{at}.function.arguments"), None, name, call_id)


def _write(
    uow: UnitOfWork,
    org_id: uuid.UUID,
    agent_id: str,
    user_id: str,
    session_id: uuid.UUID,
    rows: list[_Row],
) -> None:
    """The session, its closed topic with the messages, its empty active topic, and the
    closed topic's summary job in the bulk lane (sent after the commit)."""
    session = uow.session
    session.execute(
        insert(ChatSession).values(id=session_id, org_id=org_id, agent_id=agent_id, user_id=user_id)
    )
    closed_id = history_topic_id(session_id)
    session.execute(
        insert(Topic).values(
            id=closed_id, session_id=session_id, status="closed", closed_at=func.now()
        )
    )
    ids = insert_messages(
        uow=uow,
        session_id=session_id,
        topic_ids=[str(closed_id)] * len(rows),
        rows=[(*row, None) for row in rows],
    )
    counted = sum(1 for row in rows if row[0] != "tool")
    session.execute(
        text(
            "UPDATE topics SET message_count = :counted, tool_message_count = :tools,"
            " last_message_id = :last WHERE id = :id"
        ),
        {"counted": counted, "tools": len(rows) - counted, "last": ids[-1], "id": closed_id},
    )
    session.execute(insert(Topic).values(session_id=session_id, status="active"))
    kwargs = {"topic_id": str(closed_id), "trigger": "import"}
    uow.enqueue(Job(SUMMARIZE_TOPIC, kwargs, lane="bulk", org=str(org_id)))
