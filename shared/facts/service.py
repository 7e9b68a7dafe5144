"""Durable facts (R22): one JSON document per org + agent + user, changed key by key.

Each change is one atomic statement on the row (`||` to set, `-` to unset), so
concurrent writers of different keys never lose each other's writes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB, insert

from shared.db.uow import UnitOfWork
from shared.facts.models import FactsDocument
from shared.memory.scope import Scope


def _scope_filter(scope: Scope) -> tuple[Any, ...]:
    return (
        FactsDocument.org_id == scope.org_id,
        FactsDocument.agent_id == scope.agent_id,
        FactsDocument.user_id == scope.user_id,
    )


def read_facts(*, uow: UnitOfWork, scope: Scope) -> dict[str, Any]:
    document = uow.session.scalar(select(FactsDocument.document).where(*_scope_filter(scope)))
    return dict(document or {})


def merge_facts(*, uow: UnitOfWork, scope: Scope, facts: dict[str, Any]) -> dict[str, Any]:
    """Create or update entries by key; returns the whole document."""
    patch = literal(facts, JSONB)
    statement = (
        insert(FactsDocument)
        .values(org_id=scope.org_id, agent_id=scope.agent_id, user_id=scope.user_id, document=patch)
        .on_conflict_do_update(
            constraint="uq_facts_scope",
            set_={"document": FactsDocument.document.op("||")(patch), "updated_at": func.now()},
        )
        .returning(FactsDocument.document)
    )
    document: dict[str, Any] = uow.session.execute(statement).scalar_one()
    return document


def unset_fact(*, uow: UnitOfWork, scope: Scope, key: str) -> bool:
    """Delete one entry; False if there was none."""
    removed = uow.session.execute(
        update(FactsDocument)
        .where(*_scope_filter(scope), FactsDocument.document.has_key(key))
        .values(document=FactsDocument.document.op("-")(key), updated_at=func.now())
    )
    return bool(removed.rowcount)  # type: ignore[attr-defined]
