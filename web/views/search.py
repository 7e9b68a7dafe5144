"""GET /agents-api/search: recall over one scope's topics and messages (shared/search/)."""

from __future__ import annotations

from typing import Any

from shared.memory.scope import Scope
from shared.search.service import SearchQuery, search
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import ErrorOut, dump
from web.schemas.search import HitOut, SearchOut, SearchQueryIn
from web.views.common import api_blueprint

bp = api_blueprint("search", "memory")


@bp.get("/search", responses={200: SearchOut, 429: ErrorOut, 503: ErrorOut})
def get_search(query: SearchQueryIn) -> dict[str, Any]:
    """The scope's topics and messages that match `q`, best first, across its sessions.
    Deprecated topics and their messages only with `includeDeprecated=true`. 429 while
    the org runs its limit of searches at once, 503 `timeout` for a search the statement
    timeout ended; both with Retry-After."""
    scope = Scope(org_id=current_org(), agent_id=query.agent_id, user_id=query.user_id)
    asked = SearchQuery(
        scope=scope, q=query.q, limit=query.limit, kind=query.kind,
        include_deprecated=query.include_deprecated,
    )  # fmt: skip
    with unit_of_work() as uow:
        found = search(uow=uow, query=asked, vectors=runtime().query_vectors)
    return dump(
        SearchOut(results=[HitOut.model_validate(hit) for hit in found.hits], mode=found.mode)
    )
