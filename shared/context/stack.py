"""The three layers of the stack as plain data (R1)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from shared.memory.block import MemoryBlock


@dataclass(frozen=True)
class DriftResult:
    from_topic_id: uuid.UUID
    from_title: str
    to_topic_id: uuid.UUID
    to_title: str


@dataclass(frozen=True)
class StableLayer:
    soul: str
    skills: list[Any]
    tools: list[Any]  # built-in tools first, then the agent's own (function definitions)
    memory: MemoryBlock
    durable_facts: dict[str, Any]
    drift_result: DriftResult | None


@dataclass(frozen=True)
class PriorTopic:
    topic_id: uuid.UUID
    title: str
    summary: str | None
    pending: bool  # closed, but its summary has not been written yet


@dataclass(frozen=True)
class SemiStableLayer:
    notes: str | None
    prior_topics: list[PriorTopic]  # oldest first


@dataclass(frozen=True)
class ThreadMessage:
    id: int
    role: str
    content: str
    tool_name: str | None
    tool_call_id: str | None
    name: str | None = None  # who spoke: the rendered message's `name`


@dataclass(frozen=True)
class VolatileLayer:
    thread: list[ThreadMessage]  # the window of the active topic, oldest first
    tool_results: list[ThreadMessage]  # tool messages since the last user message
    working_memory: dict[str, Any] | None


@dataclass(frozen=True)
class ContextStack:
    stable: StableLayer
    semi_stable: SemiStableLayer
    volatile: VolatileLayer
