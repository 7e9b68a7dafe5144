"""The limits the calling org is held to, and its LLM tokens this month."""

from __future__ import annotations

from web.schemas.common import CamelModel


class LimitsOut(CamelModel):
    requests_per_s: float  # 0: no limit
    request_burst: int
    llm_rpm: int  # model calls a minute of its work; 0: no limit
    monthly_tokens: int  # model tokens a calendar month (UTC); 0: no limit
    month: str  # that month, "2026-12"
    tokens_used: int  # this month's, failed calls' none
    budget_exhausted: bool  # fallback summaries, no drift, until the month turns
