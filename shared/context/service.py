"""Assembling the stack for a session's next turn, reading a bounded amount of data (R2).

Whatever the topic's length, assembly is a fixed set of index lookups: the session,
its active topic, the agent profile, the memory block (Redis, or one indexed query on a
miss), the facts document, the latest fork, the active notes, at most
MAX_PRIOR_TOPICS closed topics and at most `window` messages — counted from the
topic's counters, never by reading the thread. (A message committed between reading
the counters and the rows shifts the window by one message for that turn; harmless.)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import redis
from sqlalchemy import select

from shared.agents.models import AgentProfile
from shared.context.stack import (
    ContextStack,
    DriftResult,
    PriorTopic,
    SemiStableLayer,
    StableLayer,
    ThreadMessage,
    VolatileLayer,
)
from shared.context.window import WindowMode, window_length
from shared.context.working_memory import get_working_memory
from shared.facts.service import read_facts
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.memory.block import UNTITLED
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.memory.service import memory_block
from shared.notes.service import active_notes_text
from shared.sessions.models import Message
from shared.sessions.service import active_topic, load_session
from shared.tools.definitions import BUILT_IN_TOOLS
from shared.topics.models import Fork, Topic

MAX_PRIOR_TOPICS = 50


@dataclass(frozen=True)
class ContextOptions:
    window: int = 20
    window_block: int = 10
    window_mode: WindowMode = "block"
    memory_token_budget: int = 2000

    @classmethod
    def from_settings(cls, settings: Settings) -> ContextOptions:
        return cls(
            window=settings.window,
            window_block=settings.window_block,
            window_mode=settings.window_mode,
            memory_token_budget=settings.memory_token_budget,
        )


def _stable(
    *, uow: UnitOfWork, client: redis.Redis, scope: Scope, session_id: uuid.UUID, budget: int
) -> StableLayer:
    profile = uow.session.get(AgentProfile, (scope.org_id, scope.agent_id))
    fork = uow.session.scalar(
        select(Fork).where(Fork.session_id == session_id).order_by(Fork.id.desc()).limit(1)
    )
    drift = None
    if fork is not None:
        drift = DriftResult(
            from_topic_id=fork.from_topic_id,
            from_title=fork.from_title or UNTITLED,
            to_topic_id=fork.to_topic_id,
            to_title=fork.to_title or UNTITLED,
        )
    return StableLayer(
        soul=profile.soul if profile else "",
        skills=list(profile.skills) if profile else [],
        tools=[*BUILT_IN_TOOLS, *(profile.tools if profile else [])],
        memory=memory_block(uow=uow, cache=MemoryCache(client), scope=scope, budget=budget),
        durable_facts=read_facts(uow=uow, scope=scope),
        drift_result=drift,
    )


def _semi_stable(*, uow: UnitOfWork, session_id: uuid.UUID, topic: Topic) -> SemiStableLayer:
    newest_first = uow.session.scalars(
        select(Topic)
        .where(Topic.session_id == session_id, Topic.status == "closed")
        .order_by(Topic.created_at.desc(), Topic.id.desc())
        .limit(MAX_PRIOR_TOPICS)
    ).all()
    prior = [
        PriorTopic(
            topic_id=t.id,
            title=t.title or UNTITLED,
            summary=t.summary,
            pending=t.summary_pending or t.summary is None,
        )
        for t in reversed(newest_first)
    ]
    return SemiStableLayer(notes=active_notes_text(uow=uow, topic_id=topic.id), prior_topics=prior)


def _volatile(
    *, uow: UnitOfWork, client: redis.Redis, topic: Topic, options: ContextOptions
) -> VolatileLayer:
    total = topic.message_count + topic.tool_message_count
    length = window_length(
        total, size=options.window, block=options.window_block, mode=options.window_mode
    )
    newest_first = uow.session.scalars(
        select(Message)
        .where(Message.topic_id == topic.id)
        .order_by(Message.id.desc())
        .limit(length)
    ).all()
    thread = [
        ThreadMessage(
            id=m.id, role=m.role, content=m.content, tool_name=m.tool_name,
            tool_call_id=m.tool_call_id, name=m.name,
        )
        for m in reversed(newest_first)
    ]  # fmt: skip
    last_user = max((i for i, m in enumerate(thread) if m.role == "user"), default=-1)
    tool_results = [m for m in thread[last_user + 1 :] if m.role == "tool"]
    return VolatileLayer(
        thread=thread,
        tool_results=tool_results,
        working_memory=get_working_memory(client, topic.session_id),
    )


def assemble_context(
    *,
    uow: UnitOfWork,
    client: redis.Redis,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    options: ContextOptions,
) -> ContextStack:
    """The stack for the session's next turn: stable, semi-stable, volatile (R1)."""
    session = load_session(uow=uow, org_id=org_id, session_id=session_id)
    scope = Scope.of(session)
    topic = active_topic(uow=uow, session_id=session.id)
    return ContextStack(
        stable=_stable(
            uow=uow, client=client, scope=scope, session_id=session.id,
            budget=options.memory_token_budget,
        ),
        semi_stable=_semi_stable(uow=uow, session_id=session.id, topic=topic),
        volatile=_volatile(uow=uow, client=client, topic=topic, options=options),
    )  # fmt: skip
