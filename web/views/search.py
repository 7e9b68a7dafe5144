"""GET and POST /agents-api/search: recall over one scope's topics and messages
(shared/search/). POST takes the same parameters as a JSON body: a search text of the
documented length (1,000 characters) can need more than the 8,190 bytes a request line
may hold (gunicorn's most), once percent-encoded."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from pydantic import BaseModel

from shared.memory.scope import Scope
from shared.search.service import SearchQuery, search
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import ErrorOut, dump
from web.schemas.search import HitOut, SearchBodyIn, SearchOut, SearchQueryIn
from web.views.common import api_blueprint

bp = api_blueprint("search", "memory")

RESPONSES: dict[str | int | HTTPStatus, type[BaseModel] | dict[Any, Any] | None] = {
    200: SearchOut,
    429: ErrorOut,
    503: ErrorOut,
}


@bp.get("/search", responses=RESPONSES)
def get_search(query: SearchQueryIn) -> dict[str, Any]:
    """The scope's topics and messages that match `q`, best first, across its sessions.
    Deprecated topics and their messages only with `includeDeprecated=true`. 429 while
    the org runs its limit of searches at once, 503 `timeout` for a search the statement
    timeout ended; both with Retry-After."""
    return _search(query)


@bp.post("/search", responses=RESPONSES)
def post_search(body: SearchBodyIn) -> dict[str, Any]:
    """GET /search with its parameters in a JSON body (for a long `q`): the same answer,
    limits and errors."""
    return _search(body)


def _search(asked: SearchQueryIn | SearchBodyIn) -> dict[str, Any]:
    scope = Scope(org_id=current_org(), agent_id=asked.agent_id, user_id=asked.user_id)
    query = SearchQuery(
        scope=scope, q=asked.q, limit=asked.limit, kind=asked.kind,
        include_deprecated=asked.include_deprecated,
    )  # fmt: skip
    with unit_of_work() as uow:
        found = search(uow=uow, query=query, vectors=runtime().query_vectors)
    return dump(
        SearchOut(results=[HitOut.model_validate(hit) for hit in found.hits], mode=found.mode)
    )
