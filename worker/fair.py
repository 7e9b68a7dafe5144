"""The worker's side of fair share (shared/infra/fair.py): a ticket serves the next org's
job, and the reconciler gives tickets to jobs that lost theirs."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import replace

from celery import Celery, Task
from opentelemetry.trace import Span
from redis.exceptions import RedisError
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from shared.bootstrap import Runtime
from shared.infra import fleet_trial, tracing
from shared.infra.fair import LANES, FairJob, FairQueue, Lane
from shared.infra.queue import LLM_BULK_QUEUE, LLM_QUEUE, Job, ticket
from shared.llm.ratelimit import RateLimited
from worker.metrics import JOB_WAIT, serving

log = logging.getLogger(__name__)

# A database blip: the job goes back to the broker after this long (then the task's
# own retries, with backoff, take over).
RETRY_AFTER_S = 5.0
# Tickets the reconciler sends a lane at most per pass: enough to restart a stalled lane,
# few enough that a wrong guess costs only empty tickets.
TOP_UP_TICKETS = 100
# Where each lane's tickets wait in the broker (shared/infra/queue.py: CeleryJobQueue).
QUEUE_OF_LANE: dict[Lane, str] = {"live": LLM_QUEUE, "bulk": LLM_BULK_QUEUE}
# Orgs a ticket tries, whose jobs their quotas turn away, before it parks.
TRIES = 4


def serve_next(
    task: Task,
    lane: Lane,
    jobs: Mapping[str, Callable[..., str]],
    *,
    on_failure: Callable[[FairJob], None],
) -> str:
    """Run the job whose org's turn it is in `lane`: its outcome, or "empty" if none waits,
    "waiting" if none is admissible now.

    A job a quota turns away (its org's in-flight share or calls a minute, the fleet's
    quota) goes back to the head of its org's list and its org yields its turn for the
    quota's wait; the ticket tries the next org, up to TRIES times. A ticket that finds
    no org admissible wakes the lane when the soonest may be (sent back with that
    countdown), or is parked if another ticket does; a parked ticket is sent again as
    jobs are admitted and end. A database blip sends the job back to the broker as
    itself with a countdown. Any other error ends it: `on_failure`, then raise.
    """
    runtime: Runtime = task.app.driftless
    fair, heartbeat = runtime.fair, runtime.heartbeat
    wait_s: float | None = None
    for _ in range(TRIES):
        # The job popped is marked running by this run, which beats until it ends, however
        # it ends (shared/infra/liveness.py): a run Redis never heard end stops beating.
        run = heartbeat.begin()
        try:
            turn = fair.take(lane, runner=run, alive_ms=heartbeat.ttl_ms)
            if turn.release:
                runtime.queue.send(ticket(lane))
            job = turn.job
            if job is None:
                wait_s = turn.retry_in_s
                break
            started = time.time()
            serving(task, job.task)
            try:
                with _job_span(job, lane, started) as span:
                    outcome = _run(fair, lane, job, turn.trial, jobs[job.task], task, run)
                    span.set_attribute("driftless.job.outcome", outcome)
            except RateLimited as exc:  # back in its org's list, marked queued again
                wait_s = exc.retry_after_s
                continue
            except (OperationalError, PoolTimeout):
                log.warning(
                    "%s %s: database unavailable, sent back", job.task, job.kwargs, exc_info=True
                )
                with tracing.resumed(job.trace):  # the retry stays in the request's trace
                    _send_back(runtime, lane, job, countdown=RETRY_AFTER_S)  # marked held there
                _done(runtime, lane, job, run)
                return "retry"
            except Exception:
                on_failure(job)
                with suppress(RedisError):  # the job's own error is the one to raise
                    _done(runtime, lane, job, run)  # lost: the reconciler sends it again
                raise
            except BaseException:
                # The hard time limit (gevent's Timeout) or a kill ends the job here: its
                # mark goes now if Redis answers, else with its run's key.
                with suppress(Exception):
                    _done(runtime, lane, job, run)
                raise
            JOB_WAIT.labels(lane).observe(max(0.0, started - job.pushed_at))
            _done(runtime, lane, job, run)
            return outcome
        finally:
            heartbeat.end(run)
    if wait_s is None:
        return "empty"
    if wait_s <= 0 or fair.park(lane, wait_s=wait_s):
        runtime.queue.send(replace(ticket(lane), countdown=wait_s or None))
    return "waiting"


# The span of a model job popped from its org's list (docs/contract.md, "Traces"): a child
# of the enqueue that pushed it, in the request's trace, linked to the ticket's task.
MODEL_JOB_SPAN = "driftless.model_job"


def _job_span(job: FairJob, lane: Lane, started: float) -> AbstractContextManager[Span]:
    """What the job did, and how long it waited in the ring (`driftless.fair.wait_ms`:
    from its push to this pop, its org's turn and its ticket's wait in the broker)."""
    attributes = {
        "driftless.job.task": job.task,
        "driftless.job.lane": lane,
        "driftless.fair.wait_ms": round(max(0.0, started - job.pushed_at) * 1000, 1),
        tracing.ORG_ID: job.org,
    }
    if isinstance(job.kwargs.get("topic_id"), str):
        attributes["driftless.topic_id"] = job.kwargs["topic_id"]
    return tracing.continued(job.trace, MODEL_JOB_SPAN, expected=(RateLimited,), **attributes)


def _done(runtime: Runtime, lane: Lane, job: FairJob, runner: str) -> None:
    """The job ended: no longer marked running; its slot is free, so a parked ticket
    (if any) tries again."""
    if runtime.fair.done(lane, job, runner=runner):
        runtime.queue.send(ticket(lane))


def _run(
    fair: FairQueue, lane: Lane, job: FairJob, trial: str | None,
    run: Callable[..., str], task: Task, runner: str,
) -> str:  # fmt: skip
    """The job, holding the lane's fleet trial if the pop gave it one (fair.py). A job a
    quota turns away has written nothing (the services write after the call): its org
    yields its turn, and does so before the trial ends, so that a fleet refusal's hold
    replaces the trial with no moment between them where the next refused org may pop."""
    holding = nullcontext() if trial is None else fleet_trial.holding(
        lambda: fair.end_trial(lane, trial)
    )  # fmt: skip
    with holding:
        try:
            return run(task.app, **job.kwargs)
        except RateLimited as exc:
            fair.yield_turn(lane, job, hold_s=exc.retry_after_s, fleet=exc.fleet, runner=runner)
            raise


def _send_back(runtime: Runtime, lane: Lane, job: FairJob, *, countdown: float) -> None:
    runtime.queue.send(Job(job.task, job.kwargs, countdown=countdown, lane=lane, org=job.org))


def top_up(
    runtime: Runtime, *, period_s: float, tickets_queued: Mapping[Lane, int] | None = None
) -> dict[str, int]:
    """Tickets for lanes whose oldest job has waited longer than a reconcile period, as
    many as the lane has jobs without a ticket.

    A ticket may have been lost (sent after the push failed, or dropped with the broker's
    data). Not lost: one parked while its org waits out a quota, and one still in the
    broker's queue (`tickets_queued`, a lane's queue length: a backlog's tickets wait
    there with its jobs). A ticket too many finds an empty lane and ends at once, so a
    wrong guess costs a few empty runs, never a job run twice.
    """
    sent: dict[str, int] = {}
    for lane in LANES:
        waiting = runtime.fair.waiting(lane)
        in_broker = (tickets_queued or {}).get(lane, 0)
        missing = waiting.jobs - waiting.parked - in_broker
        if missing > 0 and waiting.oldest_s > period_s:
            count = min(missing, TOP_UP_TICKETS)
            for _ in range(count):
                runtime.queue.send(ticket(lane))
            sent[lane] = count
            log.warning("fair queue %s: %d tickets topped up (oldest %.0f s, %d jobs, %d"
                        " tickets queued)", lane, count, waiting.oldest_s, waiting.jobs,
                        in_broker)  # fmt: skip
    return sent


def tickets_queued(app: Celery) -> dict[Lane, int]:
    """Each lane's queue length in the broker: its tickets not yet fetched by a worker
    (and the few model jobs sent there with a countdown). One round trip a lane."""
    with app.connection_for_read() as connection:
        channel = connection.default_channel
        return {
            lane: int(channel.queue_declare(queue=QUEUE_OF_LANE[lane]).message_count)
            for lane in LANES
        }
