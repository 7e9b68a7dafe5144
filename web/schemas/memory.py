"""A scope's cross-session memory and its durable facts."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal

from pydantic import Field, RootModel, StringConstraints, field_validator

from shared.domain.limits import MAX_FACT_KEY_CHARS
from shared.domain.storable import storable
from shared.facts.history import MAX_HISTORY_PAGE
from web.schemas.common import CamelModel, Input, Moment, ScopeQuery

FactKey = Annotated[str, StringConstraints(min_length=1, max_length=MAX_FACT_KEY_CHARS)]


class FactPath(Input):
    key: str = Field(min_length=1, max_length=MAX_FACT_KEY_CHARS)


class FactsIn(RootModel[dict[FactKey, Any]]):
    """Entries to create or update, by key."""

    root: dict[FactKey, Any] = Field(min_length=1)

    _storable = field_validator("root", mode="before")(storable)


class FactsOut(CamelModel):
    facts: dict[str, Any]


class FactHistoryQuery(ScopeQuery):
    key: FactKey
    before: Moment | None = None  # versions that began before this moment (a page's nextBefore)
    limit: int = Field(default=MAX_HISTORY_PAGE, ge=1, le=MAX_HISTORY_PAGE)


ChangedByOut = Literal["user", "agent", "import"]


class FactVersionOut(CamelModel):
    key: str
    value: Any
    valid_from: dt.datetime
    valid_to: dt.datetime | None  # null: the current value
    changed_by: ChangedByOut
    removed_by: ChangedByOut | None  # who removed the key at validTo (null: replaced, or current)


class FactHistoryOut(CamelModel):
    history: list[FactVersionOut]  # newest first
    next_before: dt.datetime | None  # the next page's `before`; null: no more


class MemoryEntryOut(CamelModel):
    topic_id: uuid.UUID
    title: str
    summary: str | None
    deprecated: bool


class MemoryOut(CamelModel):
    entries: list[MemoryEntryOut]
    tokens: int
    truncated: bool
    dropped: int
