from __future__ import annotations

from typing import Any

from shared.facts.history import read_history
from shared.facts.service import merge_facts, read_facts, unset_fact
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.memory.service import memory_block
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import ErrorOut, ScopeQuery, dump
from web.schemas.memory import (
    FactHistoryOut,
    FactHistoryQuery,
    FactPath,
    FactsIn,
    FactsOut,
    FactVersionOut,
    MemoryEntryOut,
    MemoryOut,
)
from web.views.common import api_blueprint

bp = api_blueprint("memory", "memory")


def _scope(query: ScopeQuery) -> Scope:
    return Scope(org_id=current_org(), agent_id=query.agent_id, user_id=query.user_id)


@bp.get("/memory", responses={200: MemoryOut})
def get_memory(query: ScopeQuery) -> dict[str, Any]:
    """Cross-session memory of a scope: promoted topics, deprecated traces, oldest first."""
    rt = runtime()
    with unit_of_work() as uow:
        block = memory_block(
            uow=uow,
            cache=MemoryCache(rt.redis),
            scope=_scope(query),
            budget=rt.settings.memory_token_budget,
        )
    entries = [MemoryEntryOut.model_validate(e) for e in block.entries]
    out = MemoryOut(
        entries=entries, tokens=block.tokens, truncated=block.dropped > 0, dropped=block.dropped
    )
    return dump(out)


@bp.get("/facts", responses={200: FactsOut})
def get_facts(query: ScopeQuery) -> dict[str, Any]:
    """The scope's durable facts (R22)."""
    with unit_of_work() as uow:
        facts = read_facts(uow=uow, scope=_scope(query))
    return dump(FactsOut(facts=facts))


@bp.get("/facts/history", responses={200: FactHistoryOut})
def get_fact_history(query: FactHistoryQuery) -> dict[str, Any]:
    """Every value the key held, newest first, with when and who; `before` pages on."""
    with unit_of_work() as uow:
        versions = read_history(
            uow=uow, scope=_scope(query), key=query.key, before=query.before, limit=query.limit
        )
    next_before = versions[-1].valid_from if len(versions) == query.limit else None
    history = [FactVersionOut.model_validate(v) for v in versions]
    return dump(FactHistoryOut(history=history, next_before=next_before))


@bp.put("/facts", responses={200: FactsOut, 413: ErrorOut})
def put_facts(query: ScopeQuery, body: FactsIn) -> dict[str, Any]:
    """Merge entries into the scope's durable facts; returns them all."""
    with unit_of_work() as uow:
        facts = merge_facts(uow=uow, scope=_scope(query), facts=body.root, changed_by="user")
        answer = dump(FactsOut(facts=facts))  # before the commit: nothing fails after it
        uow.commit()
    return answer


@bp.delete("/facts/<key>", responses={204: None})
def delete_fact(path: FactPath, query: ScopeQuery) -> tuple[str, int]:
    """Delete one entry (204 whether or not it existed: DELETE is idempotent)."""
    with unit_of_work() as uow:
        unset_fact(uow=uow, scope=_scope(query), key=path.key, changed_by="user")
        uow.commit()
    return "", 204
