"""An org's own model, bring your own key (shared/providers/)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field

from shared.infra.targets import MAX_URL_LENGTH
from shared.providers.service import MAX_API_KEY_LENGTH, MAX_MODEL_LENGTH
from web.schemas.common import Body, CamelModel


class ProviderIn(Body):
    # An OpenAI-compatible server's base URL (https://api.openai.com/v1); omitted: the fleet's.
    base_url: str | None = Field(default=None, min_length=1, max_length=MAX_URL_LENGTH)
    api_key: str = Field(min_length=1, max_length=MAX_API_KEY_LENGTH)
    model: str = Field(min_length=1, max_length=MAX_MODEL_LENGTH)


class ProviderOut(CamelModel):
    """What the org's summaries and drift calls use; never the API key."""

    source: Literal["org", "fleet"]  # fleet: no model of its own
    model: str
    base_url: str | None  # the org's own; null: the fleet's
    updated_at: dt.datetime | None  # null for the fleet's
