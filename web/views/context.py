from __future__ import annotations

from typing import Any

from shared.context.render import render
from shared.context.service import ContextOptions, assemble_context
from shared.context.stack import ContextStack
from shared.context.working_memory import set_working_memory
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas import (
    ContextOut,
    ErrorOut,
    LayersOut,
    SessionPath,
    WorkingMemoryIn,
    WorkingMemoryOut,
    dump,
)
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


def context_document(stack: ContextStack) -> dict[str, Any]:
    """The JSON of a context stack, shared by this endpoint and the MCP `get_context` tool."""
    rendered = render(stack)
    layers = LayersOut.model_validate(
        {"stable": stack.stable, "semi_stable": stack.semi_stable, "volatile": stack.volatile}
    )
    out = ContextOut(
        layers=layers,
        messages=rendered.messages,
        tokens=rendered.tokens,
        stable_prefix_hash=rendered.stable_prefix_hash,
    )
    return dump(out)


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
