from __future__ import annotations

from typing import Any

from shared.topics.service import get_topic
from web.auth import current_org
from web.runtime import unit_of_work
from web.schemas import TopicOut, TopicPath, dump
from web.views.common import api_blueprint

bp = api_blueprint("topics", "topics")


@bp.get("/topics/<tid>", responses={200: TopicOut})
def get(path: TopicPath) -> dict[str, Any]:
    """A topic with its summary and memory flags."""
    with unit_of_work() as uow:
        topic = get_topic(uow=uow, org_id=current_org(), topic_id=path.tid)
    return dump(TopicOut.model_validate(topic))
