"""A topic that a fork splits while an LLM answer is held: the race of [2.1] item 5.

Shared by tests/integration/evaluations/test_stale_refresh.py (each case) and
tests/faults/test_hardening_attacks.py (the campaign with counts).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.infra.db.uow import UnitOfWork
from shared.llm.base import Completion, DriftRequest, SummaryRequest
from shared.sessions.fork import fork_topic, record_fork
from shared.sessions.service import create_session, post_message
from shared.topics.models import Topic
from tests.conftest import new_key

BETA_SUMMARY = {"title": "Beta", "summary": "All about beta.", "include_in_memory": True}


class HeldLLM:
    """Answers "no drift" at once; holds every summary answer until released."""

    model = "held"

    def __init__(self) -> None:
        self.summary_asked = threading.Event()
        self.release = threading.Event()

    def detect_drift(self, request: DriftRequest) -> Completion:
        answer = {"drift": False, "first_message_id": None, "new_title": None}
        return Completion(text=json.dumps(answer), model="held")

    def summarize(self, request: SummaryRequest) -> Completion:
        self.summary_asked.set()
        assert self.release.wait(timeout=30), "the test never released the answer"
        return Completion(text=json.dumps(BETA_SUMMARY), model="held")


@dataclass(frozen=True)
class AlphaThenBeta:
    topic_id: uuid.UUID
    ids: list[int]  # 9 alpha messages, then 31 beta ones


def alpha_then_beta(
    new_uow: Callable[[], UnitOfWork], committed_factory: sessionmaker[Session]
) -> AlphaThenBeta:
    """A committed session whose one topic holds 9 alpha and 31 beta messages."""
    key = new_key(committed_factory)
    with new_uow() as uow:
        org_id = org_for_key(uow=uow, key=key)
        assert org_id is not None
        view = create_session(uow=uow, org_id=org_id, agent_id="planner", user_id="ada")
        ids = []
        for i in range(40):
            posted = post_message(
                uow=uow, org_id=org_id, session_id=view.session.id,
                role="user" if i % 2 == 0 else "assistant",
                content=f"{'alpha' if i < 9 else 'beta'} point {i}",
            )  # fmt: skip
            ids.append(posted.message.id)
        uow.commit()
    return AlphaThenBeta(view.topics[0].id, ids)


def fork_at(new_uow: Callable[[], UnitOfWork], topic_id: uuid.UUID, first_id: int) -> uuid.UUID:
    """Fork the topic as the pipeline does, committed; the new topic's id."""
    with new_uow() as uow:
        forked = fork_topic(uow=uow, topic_id=topic_id, first_message_id=first_id, new_title="Beta")
        assert forked is not None
        record_fork(uow=uow, forked=forked, first_message_id=first_id)
        uow.commit()
        return forked.new.id


def load_topic(new_uow: Callable[[], UnitOfWork], topic_id: uuid.UUID) -> Topic:
    with new_uow() as uow:
        topic = uow.session.get(Topic, topic_id)
        assert topic is not None
        return topic


def assert_alpha_untouched(alpha: Topic, ids: list[int]) -> None:
    """The prior topic is what the fork left: closed, alpha only, nothing of beta's answer."""
    assert alpha.status == "closed"
    assert alpha.last_message_id == ids[8]
    assert alpha.title != "Beta" and alpha.summary != BETA_SUMMARY["summary"]
    assert alpha.keep_in_memory is False
    watermark = alpha.summarized_through_id
    assert watermark is None or watermark <= alpha.last_message_id
