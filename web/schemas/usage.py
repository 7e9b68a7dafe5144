"""The calling org's LLM usage: calls and tokens since a moment, by model."""

from __future__ import annotations

import datetime as dt

from web.schemas.common import CamelModel, Input, Moment


class UsageQuery(CamelModel, Input):
    since: Moment | None = None  # default: 30 days ago


class ModelUsageOut(CamelModel):
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int


class UsageOut(CamelModel):
    since: dt.datetime
    llm_calls: int  # failed calls included (with no tokens)
    prompt_tokens: int
    completion_tokens: int
    by_model: dict[str, ModelUsageOut]
    budget_exhausted: bool  # its tokens this month are used up (GET /limits says more)
