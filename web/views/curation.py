from __future__ import annotations

from typing import Any

from shared.curation.service import memory_history, user_cycle_memory, user_set_memory
from shared.evaluations.service import list_evaluations
from web.auth import current_org
from web.runtime import unit_of_work
from web.schemas.common import TopicPath, dump
from web.schemas.curation import (
    EvaluationOut,
    EvaluationsOut,
    HistoryOut,
    MemoryChangeOut,
    MemoryStateIn,
)
from web.schemas.topics import TopicOut
from web.views.common import api_blueprint

bp = api_blueprint("curation", "curation")


@bp.put("/topics/<tid>/memory", responses={200: TopicOut})
def set_memory(path: TopicPath, body: MemoryStateIn) -> dict[str, Any]:
    """The user puts a topic in a memory state (R17); the choice sticks (R20, R21)."""
    with unit_of_work() as uow:
        topic = user_set_memory(uow=uow, org_id=current_org(), topic_id=path.tid, state=body.state)
        answer = dump(TopicOut.model_validate(topic))  # before the commit: nothing fails after it
        uow.commit()
    return answer


@bp.post("/topics/<tid>/memory/cycle", responses={200: TopicOut})
def cycle_memory(path: TopicPath) -> dict[str, Any]:
    """The brain toggle: none → promoted → deprecated → none (R17)."""
    with unit_of_work() as uow:
        topic = user_cycle_memory(uow=uow, org_id=current_org(), topic_id=path.tid)
        answer = dump(TopicOut.model_validate(topic))  # before the commit: nothing fails after it
        uow.commit()
    return answer


@bp.get("/topics/<tid>/history", responses={200: HistoryOut})
def history(path: TopicPath) -> dict[str, Any]:
    """Every curation change of the topic: who, what, from → to, when."""
    with unit_of_work() as uow:
        changes = memory_history(uow=uow, org_id=current_org(), topic_id=path.tid)
    return dump(HistoryOut(changes=[MemoryChangeOut.model_validate(c) for c in changes]))


@bp.get("/topics/<tid>/evaluations", responses={200: EvaluationsOut})
def evaluations(path: TopicPath) -> dict[str, Any]:
    """The topic's evaluations and summarizations, oldest first."""
    with unit_of_work() as uow:
        rows = list_evaluations(uow=uow, org_id=current_org(), topic_id=path.tid)
    return dump(EvaluationsOut(evaluations=[EvaluationOut.model_validate(r) for r in rows]))
