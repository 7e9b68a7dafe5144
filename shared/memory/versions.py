"""A per-scope memory version in PostgreSQL, bumped in the transaction that changes memory.

The Redis cache is invalidated by a job sent after the commit; should that job be lost
(a broker restart), the cached block would stay stale until its TTL. The version makes
that detectable: a cached block records the version it was built from, and the
reconciler invalidates any block older than the version PostgreSQL holds.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import BigInteger, DateTime, ForeignKey, Index, String, bindparam, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import INVALIDATE_MEMORY, Job
from shared.memory.scope import Scope


class MemoryVersion(Base):
    __tablename__ = "memory_versions"
    # The reconciler looks only at recently changed scopes.
    __table_args__ = (Index("ix_memory_versions_changed_at", "changed_at"),)

    org_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("orgs.id", ondelete="CASCADE"), primary_key=True
    )
    agent_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=1)
    changed_at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


# Built once: a promoted topic's summary runs it (the worker's hot path), and an
# ORM-enabled insert costs several times the round trip in Python.
_BUMP_VERSION = (
    insert(MemoryVersion)
    .values(
        org_id=bindparam("org"), agent_id=bindparam("agent"), user_id=bindparam("user"), version=1
    )
    .on_conflict_do_update(
        index_elements=["org_id", "agent_id", "user_id"],
        set_={"version": MemoryVersion.version + 1, "changed_at": func.now()},
    )
)


def memory_changed(*, uow: UnitOfWork, scope: Scope) -> None:
    """The scope's memory block changes with this transaction: bump its version (same
    transaction) and invalidate its cache once the transaction commits (R15)."""
    uow.session.connection().execute(
        _BUMP_VERSION, {"org": scope.org_id, "agent": scope.agent_id, "user": scope.user_id}
    )
    uow.enqueue(Job(INVALIDATE_MEMORY, scope.as_job_kwargs()))


def memory_version(*, uow: UnitOfWork, scope: Scope) -> int:
    """The scope's current version; 0 for a scope whose memory never changed."""
    version = uow.session.scalar(
        select(MemoryVersion.version).where(
            MemoryVersion.org_id == scope.org_id,
            MemoryVersion.agent_id == scope.agent_id,
            MemoryVersion.user_id == scope.user_id,
        )
    )
    return int(version or 0)


@dataclass(frozen=True)
class ScopeVersion:
    scope: Scope
    version: int


def changed_since(*, uow: UnitOfWork, since: dt.datetime, limit: int) -> Sequence[ScopeVersion]:
    """Scopes whose memory changed after `since`, newest change first."""
    rows = uow.session.execute(
        select(MemoryVersion)
        .where(MemoryVersion.changed_at > since)
        .order_by(MemoryVersion.changed_at.desc())
        .limit(limit)
    ).scalars()
    return [ScopeVersion(Scope.of(r), r.version) for r in rows]
