"""Search of a scope's topics and messages (shared/search/)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Literal

from pydantic import Field

from shared.search.service import DEFAULT_LIMIT
from web.schemas.common import Body, CamelModel, QueryFlag, ScopeId, ScopeQuery


class SearchQueryIn(ScopeQuery):
    # Bounds are the domain's (shared/search/service.py), shared with the recall tool:
    # its 422s name the field whichever way the query came.
    q: str
    limit: int = DEFAULT_LIMIT
    kind: Literal["topic", "message"] | None = None
    include_deprecated: QueryFlag = False


class SearchBodyIn(Body):
    """POST /search: GET's parameters as a JSON body, for a `q` whose percent-encoding
    passes the request line's limit (1,000 CJK characters are 9,000 bytes)."""

    agent_id: ScopeId
    user_id: ScopeId
    q: str
    limit: int = DEFAULT_LIMIT
    kind: Literal["topic", "message"] | None = None
    include_deprecated: bool = False


class HitOut(CamelModel):
    kind: Literal["topic", "message"]
    topic_id: uuid.UUID
    session_id: uuid.UUID
    message_id: int | None
    title: str | None
    snippet: str
    memory_state: Literal["none", "promoted", "deprecated"]
    score: float = Field(ge=0)
    created_at: dt.datetime


class SearchOut(CamelModel):
    results: list[HitOut]
    # hybrid: words and meaning fused; lexical: by words alone (embeddings off, or the
    # query's vector not made in time: the search still answers).
    mode: Literal["lexical", "hybrid"]
