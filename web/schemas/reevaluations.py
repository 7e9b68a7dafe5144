"""Re-evaluation campaigns of the calling org (shared/reevaluations/)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Literal

from pydantic import BaseModel, Field

from shared.reevaluations.service import MAX_RATE, MIN_RATE
from web.schemas.common import CamelModel, Moment, OptionalBody, ScopeId

State = Literal["running", "finished", "cancelled"]


class ReevaluationPath(BaseModel):
    reevaluation_id: uuid.UUID


class ReevaluationIn(OptionalBody):
    """Which of the org's topics (every one when empty), and how fast."""

    agent_id: ScopeId | None = None
    user_id: ScopeId | None = None
    since: Moment | None = None  # topics created at or after
    # Topics enqueued a second; default 5 (shared/reevaluations/service.py).
    rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)


class StartedOut(CamelModel):
    id: uuid.UUID
    state: State  # finished at once when nothing matched
    total: int


class ReevaluationOut(CamelModel):
    id: uuid.UUID
    state: State
    total: int  # matching topics; once all were enqueued, how many were
    enqueued: int
    done: int  # re-evaluated, or found current (no LLM call)
    failed: int  # their job failed for good, or never came back
    agent_id: str | None
    user_id: str | None
    since: dt.datetime | None
    rate: float
    created_at: dt.datetime
    finished_at: dt.datetime | None  # finished or cancelled


class ReevaluationsOut(CamelModel):
    reevaluations: list[ReevaluationOut]
