"""Liveness and readiness."""

from __future__ import annotations

from pydantic import BaseModel, Field


class HealthOut(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
