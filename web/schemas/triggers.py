"""Exit triggers: a request to evaluate a topic, and what became of it."""

from __future__ import annotations

from typing import Literal

from web.schemas.common import Body, CamelModel


class EvaluateIn(Body):
    trigger: Literal["navigation", "visibility", "disconnect", "manual"]


class EvaluateOut(CamelModel):
    status: Literal["scheduled", "coalesced", "suppressed", "dropped"]
