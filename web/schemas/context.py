"""The context stack and working memory, and the JSON of a stack (`context_document`)."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import RootModel, field_validator

from shared.context.render import render
from shared.context.stack import ContextStack
from shared.domain.storable import storable
from web.schemas.common import CamelModel, dump
from web.schemas.memory import MemoryEntryOut


class DriftResultOut(CamelModel):
    from_topic_id: uuid.UUID
    from_title: str
    to_topic_id: uuid.UUID
    to_title: str


class MemoryBlockOut(CamelModel):
    entries: list[MemoryEntryOut]
    tokens: int
    dropped: int


class StableOut(CamelModel):
    soul: str
    skills: list[Any]
    tools: list[Any]  # as stored: a profile from before [4.1] may hold what PUT now refuses
    memory: MemoryBlockOut
    durable_facts: dict[str, Any]
    drift_result: DriftResultOut | None


class PriorTopicOut(CamelModel):
    topic_id: uuid.UUID
    title: str
    summary: str | None
    pending: bool


class SemiStableOut(CamelModel):
    notes: str | None
    prior_topics: list[PriorTopicOut]


class ThreadMessageOut(CamelModel):
    id: int
    role: str
    content: str
    name: str | None
    tool_name: str | None
    tool_call_id: str | None


class VolatileOut(CamelModel):
    thread: list[ThreadMessageOut]
    tool_results: list[ThreadMessageOut]
    working_memory: dict[str, Any] | None


class LayersOut(CamelModel):
    stable: StableOut
    semi_stable: SemiStableOut
    volatile: VolatileOut


class ContextOut(CamelModel):
    layers: LayersOut
    messages: list[dict[str, Any]]
    tokens: dict[str, int]
    stable_prefix_hash: str


class WorkingMemoryIn(RootModel[dict[str, Any]]):
    """Any JSON object; the agent runtime's scratch state for this session."""

    _storable = field_validator("root", mode="before")(storable)


class WorkingMemoryOut(CamelModel):
    working_memory: dict[str, Any]


def context_document(stack: ContextStack) -> dict[str, Any]:
    """The JSON of a context stack, shared by GET /sessions/{id}/context and MCP `get_context`."""
    rendered = render(stack)
    layers = LayersOut.model_validate(
        {"stable": stack.stable, "semi_stable": stack.semi_stable, "volatile": stack.volatile}
    )
    out = ContextOut(
        layers=layers,
        messages=rendered.messages,
        tokens=rendered.tokens,
        stable_prefix_hash=rendered.stable_prefix_hash,
    )
    return dump(out)
