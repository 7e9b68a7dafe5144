"""Search of one scope's topics and messages (GET /agents-api/search, the `recall` tool).

Nothing here enters a prompt by itself: it answers the agent that asks (the bounded
context stays bounded, R2 and R16). How hits are found and ranked: shared/search/ranking.py.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from shared.domain.errors import Invalid
from shared.infra.db.uow import UnitOfWork
from shared.memory.scope import Scope
from shared.search import ranking
from shared.search.admission import search_slot
from shared.topics.models import memory_state

Kind = Literal["topic", "message"]
KINDS: tuple[Kind, ...] = ("topic", "message")
MAX_QUERY_CHARS = 1000
MAX_LIMIT = 50
DEFAULT_LIMIT = 10


@dataclass(frozen=True)
class SearchQuery:
    scope: Scope
    q: str
    limit: int = DEFAULT_LIMIT
    kind: Kind | None = None  # None: both, best first
    include_deprecated: bool = False


@dataclass(frozen=True)
class Hit:
    kind: Kind
    topic_id: uuid.UUID
    session_id: uuid.UUID
    message_id: int | None  # None for a topic
    title: str | None
    snippet: str
    memory_state: str
    score: float
    created_at: dt.datetime


def hit_json(hit: Hit) -> dict[str, Any]:
    """A hit as the API answers it (camelCase), for the recall tool's stored result."""
    return {
        "kind": hit.kind,
        "topicId": str(hit.topic_id),
        "sessionId": str(hit.session_id),
        "messageId": hit.message_id,
        "title": hit.title,
        "snippet": hit.snippet,
        "memoryState": hit.memory_state,
        "score": hit.score,
        # As the API writes it (pydantic): UTC with a Z.
        "createdAt": hit.created_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
    }


def checked(query: SearchQuery) -> SearchQuery:
    """The query, or Invalid naming what is wrong with it."""
    if not query.q.strip():
        raise Invalid("q: must not be empty")
    if len(query.q) > MAX_QUERY_CHARS:
        raise Invalid(f"q: at most {MAX_QUERY_CHARS} characters")
    if "\x00" in query.q:
        raise Invalid("q: must not contain NUL characters")
    if not 1 <= query.limit <= MAX_LIMIT:
        raise Invalid(f"limit: must be between 1 and {MAX_LIMIT}")
    if query.kind is not None and query.kind not in KINDS:
        raise Invalid(f"kind: must be one of {', '.join(KINDS)}")
    return query


def search(*, uow: UnitOfWork, query: SearchQuery) -> list[Hit]:
    """The scope's best matches first; an empty list when the query has no searchable
    word (only stop-words or punctuation). TooBusy while the org runs its limit of
    searches (shared/search/admission.py)."""
    query = checked(query)
    with search_slot(uow=uow, org_id=query.scope.org_id):  # TooBusy past the org's cap
        rows = uow.connection().execute(
            ranking.SEARCH,
            {
                "q": query.q,
                "org": query.scope.org_id,
                "agent": query.scope.agent_id,
                "user": query.scope.user_id,
                "limit": query.limit,
                "messages": query.kind in (None, "message"),
                "topics": query.kind in (None, "topic"),
                "deprecated": query.include_deprecated,
                "common_matches": ranking.COMMON_MATCHES,
                "headline": ranking.HEADLINE,
                "whole": ranking.WHOLE_SNIPPET_CHARS,
            },
        )
        return [_hit(row) for row in rows]


def _hit(row: object) -> Hit:
    r = row._mapping  # type: ignore[attr-defined]
    return Hit(
        kind=r["kind"],
        topic_id=r["topic_id"],
        session_id=r["session_id"],
        message_id=r["message_id"],
        title=r["title"],
        snippet=r["snippet"],
        memory_state=memory_state(keep=r["keep_in_memory"], deprecated=r["deprecated"]),
        score=round(float(r["score"]), 6),
        created_at=r["created_at"],
    )
