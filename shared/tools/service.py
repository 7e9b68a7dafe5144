"""Executing a built-in tool for a session (R7, R8, R19–R23).

The call and its result are stored as two `tool` messages in the active topic, in the
transaction that applied the tool, so the thread always shows what the tool did.

A toolCallId names one call in its session: an agent runtime that lost an answer and
retries the call with the same id gets the stored result, and the tool does not run
again. Calls of a session are serialized by the session's row lock (R4), so a retry
racing the first attempt waits for it and then finds its result.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from shared.curation.rules import Refused
from shared.curation.service import agent_curate_memory
from shared.domain.errors import Conflict, Invalid, NotFound, TooLarge
from shared.facts.service import merge_facts, read_facts, unset_fact
from shared.infra.db.uow import UnitOfWork
from shared.memory.scope import Scope
from shared.notes.service import NotesView, append_notes, read_notes, replace_notes
from shared.search.service import QueryVectors, SearchQuery, hit_json, search
from shared.sessions.models import ChatSession, Message
from shared.sessions.service import active_topic, append_message, load_session
from shared.tools import arguments as args
from shared.tools.definitions import BUILT_IN_TOOL_NAMES
from shared.topics.models import Topic


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    result: Any = None
    error: str | None = None
    tool_call_id: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.ok:
            return {"ok": True, "result": self.result}
        return {"ok": False, "error": self.error}


def _notes_json(view: NotesView) -> dict[str, Any]:
    return {"topicId": str(view.topic_id), "content": view.content, "archived": view.archived}


def _run_notes(uow: UnitOfWork, session: ChatSession, topic: Topic, call: Any) -> ToolResult:
    if isinstance(call, args.NotesSet):
        return ToolResult(
            ok=True, result=_notes_json(append_notes(uow=uow, topic=topic, content=call.content))
        )
    if isinstance(call, args.NotesUpdate):
        return ToolResult(
            ok=True, result=_notes_json(replace_notes(uow=uow, topic=topic, content=call.content))
        )
    topic_id = call.topic_id or topic.id
    owned = uow.session.get(Topic, topic_id)
    if owned is None or owned.session_id != session.id:
        return ToolResult(ok=False, error=f"topic {topic_id} is not a topic of this session")
    return ToolResult(ok=True, result=_notes_json(read_notes(uow=uow, topic_id=topic_id)))


def _run_important_info(uow: UnitOfWork, scope: Scope, call: Any) -> ToolResult:
    if isinstance(call, args.FactSet):
        merge_facts(uow=uow, scope=scope, facts={call.key: call.value}, changed_by="agent")
        return ToolResult(ok=True, result={"key": call.key, "value": call.value})
    if isinstance(call, args.FactUnset):
        removed = unset_fact(uow=uow, scope=scope, key=call.key, changed_by="agent")
        return ToolResult(ok=True, result={"key": call.key, "removed": removed})
    facts = read_facts(uow=uow, scope=scope)
    if call.key is None:
        return ToolResult(ok=True, result={"facts": facts})
    if call.key not in facts:
        return ToolResult(ok=False, error=f"no durable fact named {call.key!r}")
    return ToolResult(ok=True, result={"key": call.key, "value": facts[call.key]})


def _run_manage_topic_memory(uow: UnitOfWork, scope: Scope, call: args.CurateTopic) -> ToolResult:
    outcome = agent_curate_memory(uow=uow, scope=scope, topic_id=call.topic_id, action=call.action)
    if isinstance(outcome, Refused):
        return ToolResult(ok=False, error=outcome.reason)
    return ToolResult(
        ok=True, result={"topicId": str(outcome.id), "memoryState": outcome.memory_state}
    )


def _run_recall(
    uow: UnitOfWork, scope: Scope, call: args.Recall, vectors: QueryVectors | None
) -> ToolResult:
    asked = SearchQuery(scope=scope, q=call.query, limit=call.limit)
    try:
        found = search(uow=uow, query=asked, vectors=vectors)
    except Invalid as exc:  # a query the search refuses (NUL, blank): the agent can rephrase
        return ToolResult(ok=False, error=exc.message)
    return ToolResult(
        ok=True, result={"results": [hit_json(hit) for hit in found.hits], "mode": found.mode}
    )


def _stored_result(
    uow: UnitOfWork, *, session_id: uuid.UUID, tool_call_id: str, call_content: str
) -> ToolResult | None:
    """What the call with this id answered when it ran in this session, if it did."""
    contents = uow.session.scalars(
        select(Message.content)
        .where(Message.session_id == session_id, Message.tool_call_id == tool_call_id)
        .order_by(Message.id)
    ).all()
    if not contents:
        return None
    # The call's message, then its result: written together under the session's lock.
    if call_content in contents[:-1]:
        try:
            stored = json.loads(contents[contents.index(call_content) + 1])
        except ValueError:  # not the tool's result: messages posted under the same id
            stored = None
        if isinstance(stored, dict) and isinstance(stored.get("ok"), bool):
            return ToolResult(
                ok=stored["ok"], result=stored.get("result"), error=stored.get("error"),
                tool_call_id=tool_call_id,
            )  # fmt: skip
    raise Conflict(
        f"toolCallId {tool_call_id!r} already names another call in this session;"
        " a retry repeats its call's tool and arguments, a new call needs a new id"
    )


def execute_tool(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    name: str,
    arguments: Any,
    tool_call_id: str | None,
    vectors: QueryVectors | None = None,
) -> ToolResult:
    """Run a built-in tool; a refusal is a result `{ok: false}`, bad arguments are Invalid.
    `vectors`: a recall's query vectors, as the HTTP search has them (hybrid search).

    A toolCallId this session already ran answers that run's result, without running.
    """
    if name not in BUILT_IN_TOOL_NAMES:
        raise NotFound(f"no built-in tool named {name!r}; see GET /agents-api/tools")
    session = load_session(uow=uow, org_id=org_id, session_id=session_id, lock=True)
    call = args.parse_arguments(name, arguments, limits=uow.limits)
    # Unescaped Unicode: the size limits count characters as the model reads them.
    call_content = json.dumps(
        {"call": {"name": name, "arguments": arguments}}, sort_keys=True, ensure_ascii=False
    )
    if tool_call_id is not None:
        stored = _stored_result(
            uow, session_id=session.id, tool_call_id=tool_call_id, call_content=call_content
        )
        if stored is not None:
            return stored
    scope = Scope.of(session)
    topic = active_topic(uow=uow, session_id=session.id)
    try:
        if name == "notes":
            result = _run_notes(uow, session, topic, call)
        elif name == "important_info":
            result = _run_important_info(uow, scope, call)
        elif name == "recall":
            result = _run_recall(uow, scope, call, vectors)
        else:
            result = _run_manage_topic_memory(uow, scope, call)
    except TooLarge as exc:  # the services wrote nothing; the agent can shorten and retry
        result = ToolResult(ok=False, error=exc.message)

    call_id = tool_call_id or f"call_{uuid.uuid4().hex[:24]}"
    for content in (
        call_content,
        json.dumps(result.to_json(), sort_keys=True, default=str, ensure_ascii=False),
    ):
        append_message(
            uow=uow, session=session, topic=topic, role="tool", content=content,
            tool_name=name, tool_call_id=call_id,
        )  # fmt: skip
    return ToolResult(ok=result.ok, result=result.result, error=result.error, tool_call_id=call_id)
