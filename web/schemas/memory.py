"""A scope's cross-session memory and its durable facts."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from pydantic import Field, RootModel, StringConstraints, field_validator

from shared.domain.limits import MAX_FACT_KEY_CHARS
from shared.domain.storable import storable
from web.schemas.common import CamelModel, Input

FactKey = Annotated[str, StringConstraints(min_length=1, max_length=MAX_FACT_KEY_CHARS)]


class FactPath(Input):
    key: str = Field(min_length=1, max_length=MAX_FACT_KEY_CHARS)


class FactsIn(RootModel[dict[FactKey, Any]]):
    """Entries to create or update, by key."""

    root: dict[FactKey, Any] = Field(min_length=1)

    _storable = field_validator("root", mode="before")(storable)


class FactsOut(CamelModel):
    facts: dict[str, Any]


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
