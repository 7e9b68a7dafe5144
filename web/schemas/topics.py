"""A topic, with its summary and memory flags, and its notes."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from web.schemas.common import CamelModel


class TopicOut(CamelModel):
    id: uuid.UUID
    session_id: uuid.UUID
    title: str | None
    summary: str | None
    summary_source: Literal["llm", "fallback"] | None
    status: Literal["active", "closed"]
    memory_state: Literal["none", "promoted", "deprecated"]
    keep_in_memory: bool
    keep_in_memory_manually_set: bool
    deprecated: bool
    deprecated_manually_set: bool
    message_count: int
    created_at: datetime
    closed_at: datetime | None
    summarized_at: datetime | None
    memory_state_set_by: Literal["user", "agent", "summarizer"] | None


class ActiveNotesOut(CamelModel):
    content: str
    updated_at: datetime


class ArchivedNotesOut(CamelModel):
    content: str
    archived_at: datetime | None


class TopicNotesOut(CamelModel):
    active: ActiveNotesOut | None
    archived: list[ArchivedNotesOut]
