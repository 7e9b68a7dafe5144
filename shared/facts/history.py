"""The history of durable facts: every value a key held, from when until when, who set it.

A change closes the key's current row (valid_to) and opens the next one at the same
moment, in the transaction of the change; an unset only closes it, naming who removed
it. So a key's rows chain without gaps while it has a value, and a gap is a time it had
none. The facts document stays the source of the current values (the context reads it).

Changes of a scope are serialized by its document's row lock (shared/facts/service.py
writes the document first), so each change sees the rows the one before it wrote.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert

from shared.domain.errors import Invalid
from shared.domain.limits import MAX_FACT_KEY_CHARS, MAX_FACT_VALUE_BYTES, check_json, check_size
from shared.facts.models import CHANGED_BY, FactVersion
from shared.infra.db.uow import UnitOfWork
from shared.memory.scope import Scope

ChangedBy = Literal["user", "agent", "import"]

# One answer of GET /facts/history holds at most this many versions; `before` pages on.
MAX_HISTORY_PAGE = 1_000

# How far ahead of this server's clock an imported fact's moment may be (another server's
# clock, set a little ahead): a moment past it is refused (_check_import).
MAX_CLOCK_SKEW = timedelta(days=1)

# Rows the export reads from the database at a time.
_EXPORT_BATCH = 500


@dataclass(frozen=True)
class FactVersionView:
    agent_id: str
    user_id: str
    key: str
    value: Any
    valid_from: datetime
    valid_to: datetime | None
    changed_by: str
    removed_by: str | None


def _view(row: FactVersion) -> FactVersionView:
    return FactVersionView(
        agent_id=row.agent_id,
        user_id=row.user_id,
        key=row.key,
        value=row.value,
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        changed_by=row.changed_by,
        removed_by=row.removed_by,
    )


def _of_scope(scope: Scope) -> tuple[Any, ...]:
    return (
        FactVersion.org_id == scope.org_id,
        FactVersion.agent_id == scope.agent_id,
        FactVersion.user_id == scope.user_id,
    )


def _check_changed_by(changed_by: str, *, field: str = "changedBy") -> None:
    if changed_by not in CHANGED_BY:
        raise Invalid(f"{field}: {changed_by!r} is not one of {', '.join(CHANGED_BY)}")


def _moment_of_change(uow: UnitOfWork, scope: Scope, keys: list[str]) -> datetime:
    """Now, by the clock (not the transaction's start: two changes in one transaction are
    two moments), and always after the keys' latest version, so a chain never runs
    backwards when the clock steps back or an import brought a later moment."""
    latest = (
        select(func.max(FactVersion.valid_from))
        .where(*_of_scope(scope), FactVersion.key.in_(keys))
        .scalar_subquery()
    )
    moment: datetime = uow.session.execute(
        select(func.greatest(func.clock_timestamp(), latest + timedelta(microseconds=1)))
    ).scalar_one()
    return moment


def record_set(
    *, uow: UnitOfWork, scope: Scope, facts: dict[str, Any], changed_by: ChangedBy
) -> None:
    """Close each key's current version and open one with its new value."""
    _check_changed_by(changed_by)
    keys = list(facts)
    moment = _moment_of_change(uow, scope, keys)
    uow.session.execute(
        update(FactVersion)
        .where(*_of_scope(scope), FactVersion.key.in_(keys), FactVersion.valid_to.is_(None))
        .values(valid_to=moment)
    )
    uow.session.execute(
        insert(FactVersion),
        [
            {
                "org_id": scope.org_id,
                "agent_id": scope.agent_id,
                "user_id": scope.user_id,
                "key": key,
                "value": value,
                "valid_from": moment,
                "changed_by": changed_by,
            }
            for key, value in facts.items()
        ],
    )


def record_unset(*, uow: UnitOfWork, scope: Scope, key: str, changed_by: ChangedBy) -> None:
    """Close the key's current version, naming who removed it."""
    _check_changed_by(changed_by)
    moment = _moment_of_change(uow, scope, [key])
    uow.session.execute(
        update(FactVersion)
        .where(*_of_scope(scope), FactVersion.key == key, FactVersion.valid_to.is_(None))
        .values(valid_to=moment, removed_by=changed_by)
    )


def read_history(
    *,
    uow: UnitOfWork,
    scope: Scope,
    key: str,
    before: datetime | None = None,
    limit: int = MAX_HISTORY_PAGE,
) -> list[FactVersionView]:
    """The key's versions newest first, those that began before `before` if given; at
    most `limit` (1 to MAX_HISTORY_PAGE)."""
    if not 1 <= limit <= MAX_HISTORY_PAGE:
        raise Invalid(f"limit: {limit} is not between 1 and {MAX_HISTORY_PAGE}")
    statement = select(FactVersion).where(*_of_scope(scope), FactVersion.key == key)
    if before is not None:
        statement = statement.where(FactVersion.valid_from < before)
    rows = uow.session.scalars(statement.order_by(FactVersion.valid_from.desc()).limit(limit))
    return [_view(row) for row in rows]


def fact_lines(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID,
    agent_id: str | None = None,
    user_id: str | None = None,
) -> Iterator[FactVersionView]:
    """Every version of every fact of the org, narrowed to an agent and/or a user when
    given, by agent, user, key, then oldest first: a stable order for the export."""
    statement = select(FactVersion).where(FactVersion.org_id == org_id)
    if agent_id is not None:
        statement = statement.where(FactVersion.agent_id == agent_id)
    if user_id is not None:
        statement = statement.where(FactVersion.user_id == user_id)
    statement = statement.order_by(
        FactVersion.agent_id, FactVersion.user_id, FactVersion.key, FactVersion.valid_from
    ).execution_options(yield_per=_EXPORT_BATCH)
    for row in uow.session.scalars(statement):
        yield _view(row)


def import_fact_version(
    *,
    uow: UnitOfWork,
    scope: Scope,
    key: str,
    value: Any,
    valid_from: datetime,
    valid_to: datetime | None,
    changed_by: str,
    removed_by: str | None = None,
) -> bool:
    """Add one version read from an export; False when the scope already had it (same key
    and valid_from), which then changes nothing.

    A current version (valid_to None) becomes the key's current value, in the document
    too, unless the scope holds a later version of the key: then it is closed at that
    version's start. A closed version is laid in as it was.
    """
    from shared.facts.service import write_document  # the document's writer imports us

    _check_import(key=key, value=value, valid_from=valid_from, valid_to=valid_to)
    check_json(value, field="value", limits=uow.limits)
    _check_changed_by(changed_by)
    if removed_by is not None:
        _check_changed_by(removed_by, field="removedBy")
    if uow.session.scalar(
        select(FactVersion.id).where(
            *_of_scope(scope), FactVersion.key == key, FactVersion.valid_from == valid_from
        )
    ):
        return False
    current = valid_to is None
    if current:
        write_document(uow=uow, scope=scope, patch={})  # the scope's lock: see the docstring
        later = uow.session.scalar(
            select(func.min(FactVersion.valid_from)).where(
                *_of_scope(scope), FactVersion.key == key, FactVersion.valid_from > valid_from
            )
        )
        if later is not None:
            valid_to, removed_by, current = later, None, False
    if current:  # the value it replaces ends where it begins
        uow.session.execute(
            update(FactVersion)
            .where(*_of_scope(scope), FactVersion.key == key, FactVersion.valid_to.is_(None))
            .values(valid_to=valid_from)
        )
    uow.session.execute(
        insert(FactVersion)
        .values(
            org_id=scope.org_id,
            agent_id=scope.agent_id,
            user_id=scope.user_id,
            key=key,
            value=value,
            valid_from=valid_from,
            valid_to=valid_to,
            changed_by=changed_by,
            removed_by=removed_by,
        )
        .on_conflict_do_nothing(constraint="uq_fact_versions_moment")
    )
    if current:
        write_document(uow=uow, scope=scope, patch={key: value})
    return True


def _check_import(*, key: str, value: Any, valid_from: datetime, valid_to: datetime | None) -> None:
    if not 1 <= len(key) <= MAX_FACT_KEY_CHARS:
        raise Invalid(f"key: must be 1 to {MAX_FACT_KEY_CHARS} characters")
    if valid_from.tzinfo is None or (valid_to is not None and valid_to.tzinfo is None):
        raise Invalid("validFrom, validTo: a moment needs its timezone")
    if valid_to is not None and valid_to < valid_from:
        raise Invalid("validTo: earlier than validFrom")
    # A value cannot have been set in the future. One that claims to be would also stick:
    # every later change must begin after it (_moment_of_change), and past the year
    # 9999 (9999-12-31T23:59:59.999999Z plus a microsecond) no moment can be read back.
    latest = datetime.now(UTC) + MAX_CLOCK_SKEW
    if max(valid_from, valid_to or valid_from) > latest:
        raise Invalid(
            f"validFrom, validTo: later than this server's clock (by more than"
            f" {MAX_CLOCK_SKEW.days} day); a fact's value cannot have been set in the future"
        )
    check_size(value, what=f"the fact {key[:60]!r}", max_bytes=MAX_FACT_VALUE_BYTES)
