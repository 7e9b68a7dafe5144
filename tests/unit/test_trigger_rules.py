"""The trigger decisions, without Redis or a worker: R26's heartbeat, R27's fire job."""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest

from shared.infra.queue import EVALUATE_TOPIC, FIRE_DEBOUNCE
from shared.triggers.debounce import Debouncer, FireResult
from shared.triggers.rules import crosses_heartbeat
from shared.triggers.service import fire_debounce


@pytest.mark.parametrize("count", range(1, 41))
def test_r26_every_tenth_user_or_assistant_message_is_a_heartbeat(count: int) -> None:
    assert crosses_heartbeat(before=count - 1, after=count, interval=10) is (count % 10 == 0)


def test_r26_a_post_of_tool_messages_alone_is_never_a_heartbeat() -> None:
    # Tool messages leave the count where it was (R7), even at a multiple of 10.
    assert not crosses_heartbeat(before=10, after=10, interval=10)


@pytest.mark.parametrize(
    ("before", "after", "crosses"),
    [(0, 9, False), (0, 10, True), (8, 23, True), (10, 19, False), (9, 40, True), (11, 20, True)],
)
def test_r26_batch_decision_a_batch_crossing_multiples_of_10_is_one_heartbeat(
    before: int, after: int, crosses: bool
) -> None:
    assert crosses_heartbeat(before=before, after=after, interval=10) is crosses


class _Burst:
    def __init__(self, result: FireResult) -> None:
        self.result = result

    def fire(self, topic_id: uuid.UUID, token: str) -> FireResult:
        return self.result


def _fire(result: FireResult) -> Any:
    topic_id = uuid.uuid4()
    fired = fire_debounce(
        debouncer=cast(Debouncer, _Burst(result)), topic_id=topic_id, token="t", trigger="manual"
    )
    return topic_id, fired


def test_r27_a_quiet_burst_fires_one_evaluation() -> None:
    topic_id, fired = _fire(FireResult("fire", 0))
    assert fired.status == "fire"
    assert (fired.send.task, fired.send.kwargs) == (
        EVALUATE_TOPIC, {"topic_id": str(topic_id), "trigger": "manual"},
    )  # fmt: skip


def test_r27_a_burst_still_going_looks_again_when_it_is_due() -> None:
    topic_id, fired = _fire(FireResult("wait", 1500))
    assert fired.status == "wait"
    assert fired.send.task == FIRE_DEBOUNCE
    assert fired.send.kwargs == {"topic_id": str(topic_id), "token": "t", "trigger": "manual"}
    assert fired.send.countdown == 1.5


def test_r27_a_stale_fire_job_sends_nothing() -> None:
    _, fired = _fire(FireResult("stale", 0))
    assert (fired.status, fired.send) == ("stale", None)
