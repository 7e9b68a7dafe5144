from __future__ import annotations

from typing import Any

from shared.context.service import ContextOptions
from shared.context.turns import Turn, post_turn
from shared.sessions import service
from shared.sessions.posting import NewMessage
from shared.sessions.service import SessionView, open_topic
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import ScopeQuery, SessionPath, dump
from web.schemas.context import context_document
from web.schemas.sessions import (
    MessageListOut,
    MessageOut,
    MessageQuery,
    MessagesIn,
    PostedBatchOut,
    PostedMessageOut,
    PostedOut,
    PostMessagesQuery,
    ScopeOut,
    ScopesOut,
    SessionIn,
    SessionOut,
    SessionsOut,
    SessionWithTopicsOut,
    StoredMessageOut,
    TopicIn,
)
from web.schemas.topics import TopicOut
from web.views.common import api_blueprint

bp = api_blueprint("sessions", "sessions")


def _session_fields(view: SessionView) -> dict[str, Any]:
    s = view.session
    return {
        "id": s.id,
        "agent_id": s.agent_id,
        "user_id": s.user_id,
        "org_id": s.org_id,
        "active_topic_id": view.active_topic_id,
        "created_at": s.created_at,
    }


@bp.post("/sessions", responses={201: SessionOut})
def create(body: SessionIn) -> tuple[dict[str, Any], int]:
    """Start a session; its first topic is created active."""
    with unit_of_work() as uow:
        view = service.create_session(
            uow=uow, org_id=current_org(), agent_id=body.agent_id, user_id=body.user_id
        )
        answer = dump(SessionOut(**_session_fields(view)))  # nothing may fail after the commit
        uow.commit()
    return answer, 201


@bp.get("/scopes", responses={200: ScopesOut})
def scopes() -> dict[str, Any]:
    """The org's agent + user pairs that have sessions, most recently active first."""
    with unit_of_work() as uow:
        found = service.list_scopes(uow=uow, org_id=current_org())
    return dump(ScopesOut(scopes=[ScopeOut.model_validate(s) for s in found]))


@bp.get("/sessions", responses={200: SessionsOut})
def list_sessions(query: ScopeQuery) -> dict[str, Any]:
    """A scope's sessions, newest first (at most 100)."""
    with unit_of_work() as uow:
        views = service.list_sessions(
            uow=uow, org_id=current_org(), agent_id=query.agent_id, user_id=query.user_id
        )
    return dump(SessionsOut(sessions=[SessionOut(**_session_fields(v)) for v in views]))


@bp.get("/sessions/<sid>", responses={200: SessionWithTopicsOut})
def get(path: SessionPath) -> dict[str, Any]:
    """A session with its topics in creation order."""
    with unit_of_work() as uow:
        view = service.get_session(uow=uow, org_id=current_org(), session_id=path.sid)
    topics = [TopicOut.model_validate(t) for t in view.topics]
    return dump(SessionWithTopicsOut(**_session_fields(view), topics=topics))


@bp.post("/sessions/<sid>/messages", responses={201: PostedOut})
def post_messages(
    path: SessionPath, query: PostMessagesQuery, body: MessagesIn
) -> tuple[dict[str, Any], int]:
    """Append one message, or a batch of 1–1,000 in order and all or none, to the active
    topic. A post that carries the topic's user + assistant count across a multiple of 10
    enqueues one drift evaluation (R26). `?context=true` answers with the context for the
    agent's next call too: one round trip per turn."""
    rt = runtime()
    org_id = current_org()
    new = [NewMessage(m.role, m.content, m.tool_name, m.tool_call_id, m.name) for m in body.batch]
    options = ContextOptions.from_settings(rt.settings) if query.context else None
    with unit_of_work() as uow:
        turn = post_turn(
            uow=uow,
            client=rt.redis,
            org_id=org_id,
            session_id=path.sid,
            messages=new,
            drift_interval=rt.settings.drift_interval,
            context_options=options,
        )
        answer = _turn_answer(turn, batch=body.is_batch)
        uow.commit()  # the answer is whole before the commit: nothing fails after it
    return answer, 201


def _turn_answer(turn: Turn, *, batch: bool) -> dict[str, Any]:
    """The post's answer; `context` only when ?context=true asked for it."""
    stored = [StoredMessageOut.model_validate(m) for m in turn.posted.messages]
    enqueued = turn.posted.drift_evaluation_enqueued
    out: PostedBatchOut | PostedMessageOut
    if batch:
        out = PostedBatchOut(messages=stored, drift_evaluation_enqueued=enqueued)
    else:
        out = PostedMessageOut(**stored[0].model_dump(), drift_evaluation_enqueued=enqueued)
    answer = out.model_dump(mode="json", by_alias=True, exclude={"context"})
    if turn.context is not None:
        answer["context"] = context_document(turn.context)
    return answer


@bp.get("/sessions/<sid>/messages", responses={200: MessageListOut})
def list_messages(path: SessionPath, query: MessageQuery) -> dict[str, Any]:
    """Messages oldest first, of the whole session or of one topic; `afterId` pages on."""
    with unit_of_work() as uow:
        messages = service.list_messages(
            uow=uow,
            org_id=current_org(),
            session_id=path.sid,
            topic_id=query.topic_id,
            after_id=query.after_id,
            limit=query.limit,
        )
    next_after = messages[-1].id if len(messages) == query.limit else None
    out = MessageListOut(
        messages=[MessageOut.model_validate(m) for m in messages], next_after_id=next_after
    )
    return dump(out)


@bp.post("/sessions/<sid>/topics", responses={201: TopicOut})
def create_topic(path: SessionPath, body: TopicIn) -> tuple[dict[str, Any], int]:
    """Open a new active topic; the prior one is closed and its summary enqueued (R25)."""
    with unit_of_work() as uow:
        topic = open_topic(uow=uow, org_id=current_org(), session_id=path.sid, title=body.title)
        answer = dump(TopicOut.model_validate(topic))  # before the commit: nothing fails after it
        uow.commit()
    return answer, 201
