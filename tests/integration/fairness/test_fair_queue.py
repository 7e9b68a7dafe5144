"""The orgs' lists of model jobs (shared/infra/fair.py) on a real Redis: round robin
across orgs, FIFO within one, lanes apart, and a ticket for every job sent."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from shared.infra.fair import FairJob, FairQueue
from shared.infra.queue import (
    EVALUATE_TOPIC,
    INVALIDATE_MEMORY,
    LLM_BULK_QUEUE,
    NEXT_MODEL_JOB,
    SUMMARIZE_TOPIC,
    CeleryJobQueue,
    Job,
)
from tests.helpers import RecordingSender


def job(org: str, n: int, *, pushed_at: float = 0.0) -> FairJob:
    return FairJob(SUMMARIZE_TOPIC, {"topic_id": f"{org}-{n}"}, org, pushed_at or 1000.0 + n)


def drain(fair: FairQueue, lane: Any = "live") -> list[str]:
    served = []
    while (popped := fair.pop(lane)) is not None:
        served.append(popped.kwargs["topic_id"])
    return served


def test_orgs_take_turns_whatever_the_length_of_their_lists(fair: FairQueue) -> None:
    for n in range(5):
        fair.push("live", job("a", n))
    fair.push("live", job("b", 0))
    fair.push("live", job("c", 0))
    fair.push("live", job("b", 1))
    # A came first with five; B and C each wait behind one of A's, not all five.
    assert drain(fair) == ["a-0", "b-0", "c-0", "a-1", "b-1", "a-2", "a-3", "a-4"]


def test_an_org_that_empties_and_comes_back_joins_at_the_tail(fair: FairQueue) -> None:
    fair.push("live", job("a", 0))
    fair.push("live", job("b", 0))
    assert fair.pop("live") == job("a", 0)
    fair.push("live", job("a", 1))  # A's list was empty: A queues behind B
    assert drain(fair) == ["b-0", "a-1"]


def test_an_empty_lane_pops_nothing(fair: FairQueue) -> None:
    assert fair.pop("live") is None
    assert fair.waiting("live").orgs == 0


def test_lanes_are_apart(fair: FairQueue) -> None:
    fair.push("bulk", job("a", 0))
    fair.push("live", job("a", 1))
    assert drain(fair, "live") == ["a-1"]
    assert drain(fair, "bulk") == ["a-0"]


def test_a_job_comes_back_as_it_went_in(fair: FairQueue) -> None:
    sent = FairJob(EVALUATE_TOPIC, {"topic_id": "t", "trigger": "heartbeat"}, "org-1", 12.5)
    fair.push("live", sent)
    assert fair.pop("live") == sent


def test_waiting_counts_orgs_jobs_and_the_oldest_wait(fair: FairQueue) -> None:
    fair.push("live", job("a", 0, pushed_at=100.0))
    fair.push("live", job("a", 1, pushed_at=101.0))
    fair.push("live", job("b", 0, pushed_at=90.0))
    waiting = fair.waiting("live", now=130.0)
    assert (waiting.orgs, waiting.jobs) == (2, 3)
    assert waiting.oldest_s == pytest.approx(40.0)
    assert fair.waiting("bulk", now=130.0).jobs == 0


def test_a_ring_entry_whose_list_was_lost_is_skipped(fair: FairQueue) -> None:
    fair.push("live", job("a", 0))
    fair.push("live", job("b", 0))
    fair._client.delete("driftless:{fair:live}:jobs:a")  # evicted, say
    assert drain(fair) == ["b-0"]
    assert fair.waiting("live").orgs == 0


def test_a_model_job_waits_in_its_orgs_list_and_the_broker_gets_its_ticket(
    fair: FairQueue,
) -> None:
    sender = RecordingSender()
    queue = CeleryJobQueue(sender, fair)
    queue.send(Job(SUMMARIZE_TOPIC, {"topic_id": "t1"}, org="org-a"))
    queue.send(Job(EVALUATE_TOPIC, {"topic_id": "t2"}, lane="bulk", org="org-b"))
    assert sender.sent == [
        (NEXT_MODEL_JOB, {"lane": "live"}, None),  # routed to llm by TASK_ROUTES
        (NEXT_MODEL_JOB, {"lane": "bulk"}, LLM_BULK_QUEUE),
    ]
    live, bulk = fair.pop("live"), fair.pop("bulk")
    assert live is not None and (live.org, live.kwargs) == ("org-a", {"topic_id": "t1"})
    assert bulk is not None and (bulk.org, bulk.task) == ("org-b", EVALUATE_TOPIC)


def test_a_retry_with_a_countdown_and_other_jobs_go_to_the_broker_as_they_are(
    fair: FairQueue,
) -> None:
    sender = RecordingSender()
    queue = CeleryJobQueue(sender, fair)
    queue.send(Job(SUMMARIZE_TOPIC, {"topic_id": "t1"}, countdown=5, org="org-a"))
    queue.send(Job(INVALIDATE_MEMORY, {"org_id": "o"}))
    assert [(name, queue_name) for name, _, queue_name in sender.sent] == [
        (SUMMARIZE_TOPIC, None),
        (INVALIDATE_MEMORY, None),
    ]
    assert fair.pop("live") is None


def test_a_job_without_an_org_takes_the_fleets_turn(fair: FairQueue) -> None:
    CeleryJobQueue(RecordingSender(), fair).send(Job(SUMMARIZE_TOPIC, {"topic_id": "t"}))
    popped = fair.pop("live")
    assert popped is not None and popped.org == "fleet"


def test_the_gauges_show_each_lane_with_no_org_label(fair: FairQueue) -> None:
    from worker.fair_metrics import FairQueueCollector

    fair.push("bulk", job("a", 0, pushed_at=1.0))
    samples = {
        (metric.name, sample.labels["lane"]): sample.value
        for metric in FairQueueCollector(fair).collect()
        for sample in metric.samples
    }
    assert samples[("driftless_fair_orgs_waiting", "live")] == 0
    assert samples[("driftless_fair_orgs_waiting", "bulk")] == 1
    assert samples[("driftless_fair_oldest_wait_seconds", "live")] == 0
    assert samples[("driftless_fair_oldest_wait_seconds", "bulk")] > 60  # pushed at t=1


def test_an_org_a_quota_turned_away_yields_its_turn_and_keeps_its_jobs_order_41(
    fair: FairQueue,
) -> None:
    for n in range(2):
        fair.push("live", job("a", n))
    fair.push("live", job("b", 0))
    first = fair.pop("live")
    assert first == job("a", 0)
    fair.yield_turn("live", first, hold_s=60, fleet=False)  # A's calls a minute: used up
    # B is served; A's jobs wait, in order, in A's list, and nothing else is admissible.
    assert drain(fair) == ["b-0"]
    turn = fair.take("live")
    assert turn.job is None and turn.retry_in_s is not None and 50 < turn.retry_in_s <= 60
    assert fair.waiting("live").jobs == 2
    # One ticket wakes the lane when A's hold ends; the others are parked, and one comes
    # back each time a job is admitted or ends.
    assert fair.park("live", wait_s=turn.retry_in_s) is True
    assert fair.park("live", wait_s=turn.retry_in_s) is False
    assert fair.done("live") is True
    assert fair.done("live") is False


def test_the_fleets_quota_holds_only_the_orgs_it_refused_41(fair: FairQueue) -> None:
    fair.push("live", job("a", 0))
    fair.push("live", job("own", 0))  # an org on its own model: not the fleet's quota
    refused = fair.pop("live")
    assert refused == job("a", 0)
    fair.yield_turn("live", refused, hold_s=60, fleet=True)
    assert drain(fair) == ["own-0"]  # A back at the ring's head, passed over while held
    fair.push("live", job("b", 0))  # not yet refused by the fleet's quota: it may ask
    assert drain(fair) == ["b-0"]


def test_at_a_refill_one_refused_org_tries_the_fleets_quota_at_a_time_42(
    fair: FairQueue,
) -> None:
    # A and B were both refused by the fleet's quota; B's turn is next when it refills.
    for org in ("b", "a", "a"):
        fair.push("live", job(org, len(org)))
    b, a = fair.pop("live"), fair.pop("live")
    assert b is not None and a is not None
    fair.yield_turn("live", a, hold_s=0.001, fleet=True)
    fair.yield_turn("live", b, hold_s=0.001, fleet=True)  # B back at the ring's head
    time.sleep(0.01)  # the refill: the hold lapsed
    first = fair.take("live")
    assert first.job == b and first.trial is not None
    # A second ticket of the same refill finds A yielding to B's trial, not racing it.
    second = fair.take("live")
    assert second.job is None and second.retry_in_s is not None and second.retry_in_s > 1
    fair.end_trial("live", first.trial)  # B's call was granted
    third = fair.take("live")
    assert third.job == a and third.trial is not None  # A's turn, and A's trial
    assert fair.take("live").job == job("a", 1)  # A's mark went with its trial


def test_a_trial_ends_only_itself_never_a_refusals_hold_42(fair: FairQueue) -> None:
    for n in range(2):
        fair.push("live", job("a", n))
    refused = fair.pop("live")
    assert refused is not None
    fair.yield_turn("live", refused, hold_s=0.001, fleet=True)
    time.sleep(0.01)
    trial = fair.take("live")
    assert trial.job == job("a", 0) and trial.trial is not None
    fair.yield_turn("live", job("a", 0), hold_s=60, fleet=True)  # refused again: a real wait
    fair.end_trial("live", trial.trial)  # the job ends: its trial was replaced already
    fair.push("live", job("b", 0))
    assert drain(fair) == ["b-0"]  # B, never refused, is not held; A still is
    held = fair.take("live")
    assert held.job is None and held.retry_in_s is not None and held.retry_in_s > 50


def test_a_pop_looks_at_a_bounded_number_of_held_orgs_41(fair: FairQueue) -> None:
    for n in range(40):
        org = f"held{n}"
        fair.push("live", job(org, 0))
        fair.yield_turn("live", fair.pop("live") or job(org, 0), hold_s=60, fleet=False)
    fair.push("live", job("free", 0))
    turns = [fair.take("live") for _ in range(4)]
    # 16 orgs a pop: the free org, 41st in the ring, is reached by the third.
    assert [t.job.kwargs["topic_id"] if t.job else None for t in turns][:3] == [
        None,
        None,
        "free-0",
    ]
    assert turns[0].retry_in_s is not None and turns[0].retry_in_s <= 0.1  # more to look at


def test_a_lane_found_empty_forgets_its_parked_tickets_41(fair: FairQueue, redis_url: str) -> None:
    fair.push("live", job("a", 0))
    refused = fair.pop("live")
    assert refused is not None
    fair.yield_turn("live", refused, hold_s=60, fleet=False)
    fair.park("live", wait_s=60)
    fair.park("live", wait_s=60)  # parked: A's job has its waker and one spare ticket
    assert fair.waiting("live").parked == 1
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys("driftless:{fair:live}:jobs:*"))  # A's job lost
    client.close()
    assert fair.take("live").retry_in_s is None  # the lane is empty...
    assert fair.waiting("live").parked == 0  # ...and its spare ticket is not counted


def test_a_trial_redis_cannot_end_lapses_instead_of_failing_the_model_call_42(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It is ended from inside the model call (the bucket's grant): a Redis error there
    # must not become the call's error. Nothing listens on port 1.
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    caplog.set_level("WARNING", logger="shared.infra.fair")
    FairQueue(unreachable).end_trial("live", "trial:gone")
    assert "the fleet trial not ended" in caplog.text
