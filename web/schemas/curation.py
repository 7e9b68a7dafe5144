"""Curation of a topic's memory state, its change history, and its evaluations."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from web.schemas.common import Body, CamelModel


class MemoryStateIn(Body):
    state: Literal["none", "promoted", "deprecated"]


class MemoryChangeOut(CamelModel):
    id: int
    actor: Literal["user", "agent", "summarizer"]
    action: str
    from_state: Literal["none", "promoted", "deprecated"]
    to_state: Literal["none", "promoted", "deprecated"]
    keep_in_memory_manually_set: bool
    deprecated_manually_set: bool
    created_at: datetime


class HistoryOut(CamelModel):
    changes: list[MemoryChangeOut]


class EvaluationOut(CamelModel):
    id: int
    trigger: str
    outcome: Literal["fork", "refresh", "skipped", "fallback"]
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    model: str | None
    error: str | None
    started_at: datetime
    finished_at: datetime


class EvaluationsOut(CamelModel):
    evaluations: list[EvaluationOut]
