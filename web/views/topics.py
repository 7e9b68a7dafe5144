from __future__ import annotations

from typing import Any

from shared.notes.service import topic_notes
from shared.sessions.service import get_topic
from web.auth import current_org
from web.runtime import unit_of_work
from web.schemas.common import TopicPath, dump
from web.schemas.topics import TopicNotesOut, TopicOut
from web.views.common import api_blueprint

bp = api_blueprint("topics", "topics")


@bp.get("/topics/<tid>", responses={200: TopicOut})
def get(path: TopicPath) -> dict[str, Any]:
    """A topic with its summary and memory flags."""
    with unit_of_work() as uow:
        topic = get_topic(uow=uow, org_id=current_org(), topic_id=path.tid)
    return dump(TopicOut.model_validate(topic))


@bp.get("/topics/<tid>/notes", responses={200: TopicNotesOut})
def notes(path: TopicPath) -> dict[str, Any]:
    """The topic's notes: the active document and the archived ones, newest first."""
    with unit_of_work() as uow:
        topic = get_topic(uow=uow, org_id=current_org(), topic_id=path.tid)
        found = topic_notes(uow=uow, topic_id=topic.id)
    return dump(TopicNotesOut.model_validate(found))
