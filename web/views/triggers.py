from __future__ import annotations

from typing import Any

from shared.evaluations.requests import request_evaluation
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import SessionPath, dump
from web.schemas.triggers import EvaluateIn, EvaluateOut
from web.views.common import api_blueprint

bp = api_blueprint("triggers", "triggers")


@bp.post("/sessions/<sid>/evaluate", responses={202: EvaluateOut})
def evaluate(path: SessionPath, body: EvaluateIn) -> tuple[dict[str, Any], int]:
    """An exit trigger: debounced per topic, answered at once, never an error (R27–R29)."""
    rt = runtime()
    with unit_of_work() as uow:
        status = request_evaluation(
            uow=uow, debouncer=rt.debouncer, queue=rt.queue, org_id=current_org(),
            session_id=path.sid, trigger=body.trigger,
        )  # fmt: skip
    return dump(EvaluateOut(status=status)), 202
