"""Durable facts (R22): one JSON document per org + agent + user, changed key by key.

Each change is one atomic statement on the row (`||` to set, `-` to unset), so
concurrent writers of different keys never lose each other's writes. Each change also
writes the history (shared/facts/history.py), after the document: the document's row lock
orders a scope's changes, so the history chains in the order the document changed.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB, insert

from shared.domain.limits import MAX_FACT_VALUE_BYTES, MAX_FACTS_BYTES, check_json, check_size
from shared.facts.history import ChangedBy, record_set, record_unset
from shared.facts.models import FactsDocument
from shared.infra.db.uow import UnitOfWork
from shared.memory.scope import Scope
from shared.webhooks.events import FACTS_CHANGED, record_event


def _scope_filter(scope: Scope) -> tuple[Any, ...]:
    return (
        FactsDocument.org_id == scope.org_id,
        FactsDocument.agent_id == scope.agent_id,
        FactsDocument.user_id == scope.user_id,
    )


def read_facts(*, uow: UnitOfWork, scope: Scope) -> dict[str, Any]:
    document = uow.session.scalar(select(FactsDocument.document).where(*_scope_filter(scope)))
    return dict(document or {})


def merge_facts(
    *, uow: UnitOfWork, scope: Scope, facts: dict[str, Any], changed_by: ChangedBy
) -> dict[str, Any]:
    """Create or update entries by key, keeping the values they replace in the history;
    returns the whole document.

    Invalid or TooLarge (shared/domain/limits.py) leaves the document as it was, so a caller
    may catch either and go on in the same transaction.
    """
    check_json(facts, field="facts", limits=uow.limits)
    for key, value in facts.items():
        check_size(value, what=f"the fact {key[:60]!r}", max_bytes=MAX_FACT_VALUE_BYTES)
    document = write_document(uow=uow, scope=scope, patch=facts)
    record_set(uow=uow, scope=scope, facts=facts, changed_by=changed_by)
    _facts_changed(uow=uow, scope=scope, document=document, set_keys=list(facts), unset_keys=[])
    return document


def write_document(*, uow: UnitOfWork, scope: Scope, patch: dict[str, Any]) -> dict[str, Any]:
    """Merge `patch` into the scope's document (created if missing) and return it, its row
    locked until the transaction ends; no history, no event: the callers write those."""
    statement = (
        insert(FactsDocument)
        .values(
            org_id=scope.org_id,
            agent_id=scope.agent_id,
            user_id=scope.user_id,
            document=literal(patch, JSONB),
        )
        .on_conflict_do_update(
            constraint="uq_facts_scope",
            set_={
                "document": FactsDocument.document.op("||")(literal(patch, JSONB)),
                "updated_at": func.now(),
            },
        )
        .returning(FactsDocument.document)
    )
    # The merged size is known only after the merge; a savepoint undoes one that grew
    # too large without undoing the rest of the caller's transaction. Concurrent writers
    # queue on the row, so each one checks the document it really produced.
    with uow.session.begin_nested():
        document: dict[str, Any] = uow.session.execute(statement).scalar_one()
        check_size(document, what="the facts document", max_bytes=MAX_FACTS_BYTES)
    return document


def unset_fact(*, uow: UnitOfWork, scope: Scope, key: str, changed_by: ChangedBy) -> bool:
    """Delete one entry, closing its value in the history; False if there was none."""
    document = uow.session.execute(
        update(FactsDocument)
        .where(*_scope_filter(scope), FactsDocument.document.has_key(key))
        .values(document=FactsDocument.document.op("-")(key), updated_at=func.now())
        .returning(FactsDocument.document)
    ).scalar()
    if document is None:
        return False
    record_unset(uow=uow, scope=scope, key=key, changed_by=changed_by)
    _facts_changed(uow=uow, scope=scope, document=document, set_keys=[], unset_keys=[key])
    return True


def _facts_changed(
    *,
    uow: UnitOfWork,
    scope: Scope,
    document: dict[str, Any],
    set_keys: list[str],
    unset_keys: list[str],
) -> None:
    """The facts.changed event: which keys changed, and the whole document as it now is."""
    record_event(
        uow,
        org_id=scope.org_id,
        type=FACTS_CHANGED,
        data={
            "agentId": scope.agent_id,
            "userId": scope.user_id,
            "set": set_keys,
            "unset": unset_keys,
            "facts": document,
        },
    )
