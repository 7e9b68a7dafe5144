"""Applying curation to topics: the user's toggle, the agent's tool, the summarizer's flag.

Every change writes a MemoryChange row, and a change of keep or deprecation enqueues
the invalidation of the scope's memory cache, sent after the commit (R15).
"""

from __future__ import annotations

import uuid

from sqlalchemy import insert, select

from shared.curation.models import MemoryChange
from shared.curation.rules import (
    Actor,
    AgentAction,
    MemoryFlags,
    Refused,
    agent_curates,
    user_cycles,
    user_sets_state,
)
from shared.domain.errors import NotFound
from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import MEMORY_CHANGES, count_on_commit
from shared.memory.scope import Scope, lock_topic
from shared.memory.versions import memory_changed
from shared.sessions.service import get_topic
from shared.topics.models import MemoryState, Topic
from shared.webhooks.events import TOPIC_MEMORY_CHANGED, record_event, scope_data


def flags_of(topic: Topic) -> MemoryFlags:
    return MemoryFlags(
        keep=topic.keep_in_memory,
        keep_manually_set=topic.keep_in_memory_manually_set,
        deprecated=topic.deprecated,
        deprecated_manually_set=topic.deprecated_manually_set,
    )


def memory_transitions(old: MemoryFlags, new: MemoryFlags) -> list[str]:
    """What a change did, as counted in metrics: promoted, demoted, deprecated, undeprecated."""
    changes = []
    if old.keep != new.keep:
        changes.append("promoted" if new.keep else "demoted")
    if old.deprecated != new.deprecated:
        changes.append("deprecated" if new.deprecated else "undeprecated")
    return changes


# Every summary that changes a topic's flags writes one (the worker's hot path): a plain
# insert built once, not an ORM object and a flush.
_INSERT_CHANGE = insert(MemoryChange)


def record_change(
    *,
    uow: UnitOfWork,
    topic: Topic,
    scope: Scope,
    new: MemoryFlags,
    actor: Actor,
    action: str,
) -> bool:
    """Store `new` on the topic; audit and invalidate if anything changed. True if it did."""
    old = flags_of(topic)
    if new == old:
        return False
    topic.keep_in_memory = new.keep
    topic.keep_in_memory_manually_set = new.keep_manually_set
    topic.deprecated = new.deprecated
    topic.deprecated_manually_set = new.deprecated_manually_set
    topic.memory_state_set_by = actor
    uow.session.connection().execute(
        _INSERT_CHANGE,
        {
            "topic_id": topic.id,
            "actor": actor,
            "action": action,
            "from_state": old.state,
            "to_state": new.state,
            "keep_in_memory_manually_set": new.keep_manually_set,
            "deprecated_manually_set": new.deprecated_manually_set,
        },
    )
    if (old.keep, old.deprecated) != (new.keep, new.deprecated):
        memory_changed(uow=uow, scope=scope)
    if old.state != new.state:
        record_event(
            uow,
            org_id=scope.org_id,
            type=TOPIC_MEMORY_CHANGED,
            data={
                **scope_data(scope, topic),
                "memoryState": new.state,
                "previousMemoryState": old.state,
                "actor": actor,
            },
        )
    for change in memory_transitions(old, new):
        count_on_commit(uow.session, MEMORY_CHANGES.labels(change, actor))
    return True


def locked_topic_in_org(
    *, uow: UnitOfWork, org_id: uuid.UUID, topic_id: uuid.UUID
) -> tuple[Topic, Scope]:
    """The topic, row-locked so concurrent curations apply one after the other."""
    locked = lock_topic(uow=uow, topic_id=topic_id, org_id=org_id)
    if locked is None:
        raise NotFound(f"topic {topic_id} not found")
    return locked


def user_set_memory(
    *, uow: UnitOfWork, org_id: uuid.UUID, topic_id: uuid.UUID, state: MemoryState
) -> Topic:
    """PUT .../memory: the user puts the topic in `state` (R17, R20, R21)."""
    topic, scope = locked_topic_in_org(uow=uow, org_id=org_id, topic_id=topic_id)
    new = user_sets_state(flags_of(topic), state)
    record_change(uow=uow, topic=topic, scope=scope, new=new, actor="user", action="set_state")
    return topic


def user_cycle_memory(*, uow: UnitOfWork, org_id: uuid.UUID, topic_id: uuid.UUID) -> Topic:
    """POST .../memory/cycle: the brain toggle (R17)."""
    topic, scope = locked_topic_in_org(uow=uow, org_id=org_id, topic_id=topic_id)
    new = user_cycles(flags_of(topic))
    record_change(uow=uow, topic=topic, scope=scope, new=new, actor="user", action="cycle")
    return topic


def agent_curate_memory(
    *, uow: UnitOfWork, scope: Scope, topic_id: uuid.UUID, action: AgentAction
) -> Topic | Refused:
    """manage_topic_memory: the agent curates a topic of its own scope (R19–R21)."""
    try:
        topic, topic_scope = locked_topic_in_org(uow=uow, org_id=scope.org_id, topic_id=topic_id)
    except NotFound:
        return Refused(f"topic {topic_id} not found")
    if topic_scope != scope:  # another user's or another agent's memory
        return Refused(f"topic {topic_id} not found")
    outcome = agent_curates(flags_of(topic), action)
    if isinstance(outcome, Refused):
        return outcome
    record_change(uow=uow, topic=topic, scope=scope, new=outcome, actor="agent", action=action)
    return topic


def memory_history(
    *, uow: UnitOfWork, org_id: uuid.UUID, topic_id: uuid.UUID
) -> list[MemoryChange]:
    """The topic's curation audit trail, oldest first."""
    topic = get_topic(uow=uow, org_id=org_id, topic_id=topic_id)
    return list(
        uow.session.scalars(
            select(MemoryChange).where(MemoryChange.topic_id == topic.id).order_by(MemoryChange.id)
        )
    )
