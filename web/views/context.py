from __future__ import annotations

from typing import Any

from shared.context.service import ContextOptions, assemble_context
from shared.context.working_memory import set_working_memory
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import ErrorOut, SessionPath, dump
from web.schemas.context import ContextOut, WorkingMemoryIn, WorkingMemoryOut, context_document
from web.views.common import api_blueprint

bp = api_blueprint("context", "context")


@bp.get("/sessions/<sid>/context", responses={200: ContextOut})
def get_context(path: SessionPath) -> dict[str, Any]:
    """The context stack for the next turn, stable first (R1–R3), rendered for a provider."""
    rt = runtime()
    options = ContextOptions.from_settings(rt.settings)
    with unit_of_work() as uow:
        stack = assemble_context(
            uow=uow, client=rt.redis, org_id=current_org(), session_id=path.sid, options=options
        )
    return context_document(stack)


@bp.put("/sessions/<sid>/working-memory", responses={200: WorkingMemoryOut, 413: ErrorOut})
def put_working(path: SessionPath, body: WorkingMemoryIn) -> dict[str, Any]:
    """Replace the session's working memory (volatile: Redis, with a TTL)."""
    answer = dump(WorkingMemoryOut(working_memory=body.root))
    with unit_of_work() as uow:
        set_working_memory(
            uow=uow,
            client=runtime().redis,
            org_id=current_org(),
            session_id=path.sid,
            document=body.root,
        )
    return answer
