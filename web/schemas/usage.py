"""The calling org's LLM usage: calls and tokens since a moment, by model."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import AwareDatetime, field_validator

from web.schemas.common import CamelModel, Input

SINCE_FORMAT = "an ISO-8601 timestamp with a timezone, such as 2026-01-01T00:00:00Z"


class UsageQuery(CamelModel, Input):
    since: AwareDatetime | None = None  # default: 30 days ago

    @field_validator("since", mode="before")
    @classmethod
    def _iso_8601(cls, value: Any) -> Any:
        """ISO-8601 only (pydantic alone also reads `1700000000` as Unix time), and
        never a local time: without its offset the moment is unknown."""
        if not isinstance(value, str):
            return value
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"must be {SINCE_FORMAT}") from None
        if parsed.tzinfo is None:
            raise ValueError(f"has no timezone: it must be {SINCE_FORMAT}")
        return parsed


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
