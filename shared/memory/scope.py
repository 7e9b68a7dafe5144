"""A memory scope: one agent's memory of one user, inside one org."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from sqlalchemy import select

from shared.infra.db.uow import UnitOfWork
from shared.sessions.models import ChatSession
from shared.topics.models import Topic


class Scoped(Protocol):
    """Anything that names an org, an agent and a user (a session, a facts document)."""

    @property
    def org_id(self) -> uuid.UUID: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...


@dataclass(frozen=True)
class Scope:
    org_id: uuid.UUID
    agent_id: str
    user_id: str

    @classmethod
    def of(cls, owner: Scoped) -> Scope:
        """The scope a session (or any row naming org, agent and user) belongs to."""
        return cls(org_id=owner.org_id, agent_id=owner.agent_id, user_id=owner.user_id)

    @cached_property
    def cache_tag(self) -> str:
        """The scope's Redis Cluster hash tag: its keys share a slot, so one Lua script may
        touch them all.

        agentId and userId are opaque strings (docs/contract.md): joined with a separator,
        agent `a:b` + user `c` and agent `a` + user `b:c` would be one key, and a `}`
        would end the hash tag early. A JSON array encodes the tuple without ambiguity,
        and hashing it keeps every character out of the key (nor does the key name the
        user, which erasure relies on).
        """
        encoded = json.dumps([str(self.org_id), self.agent_id, self.user_id], ensure_ascii=False)
        return "{" + hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest() + "}"

    def as_job_kwargs(self) -> dict[str, Any]:
        return {"org_id": str(self.org_id), "agent_id": self.agent_id, "user_id": self.user_id}

    @classmethod
    def from_job_kwargs(cls, org_id: str, agent_id: str, user_id: str) -> Scope:
        return cls(org_id=uuid.UUID(org_id), agent_id=agent_id, user_id=user_id)


def lock_topic(
    *, uow: UnitOfWork, topic_id: uuid.UUID, org_id: uuid.UUID | None = None
) -> tuple[Topic, Scope] | None:
    """The topic, row-locked, with the scope whose memory it is in; None if there is no
    such topic (in `org_id`, when given).

    Every writer of a topic's summary or memory flags takes this lock, so they apply one
    after the other, and gets the scope whose memory version the change may bump (R15).
    """
    query = (
        select(Topic, ChatSession)
        .join(ChatSession, ChatSession.id == Topic.session_id)
        .where(Topic.id == topic_id)
        .with_for_update(of=Topic)
    )
    if org_id is not None:
        query = query.where(ChatSession.org_id == org_id)
    row = uow.session.execute(query).first()
    if row is None:
        return None
    topic, session = row
    return topic, Scope.of(session)
