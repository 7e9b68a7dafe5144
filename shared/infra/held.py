"""Which model jobs something still holds: an org's list, the broker, or a live worker.

The reconciler (shared/reconcile/service.py) sends a topic's summary or evaluation again
only when PostgreSQL shows it undone *and* nothing holds its job: a job waiting behind a
backlog is not lost, however long it waits. Each job's subject (its task and topic:
fair.subject_of) is marked where it is by the step that moves it there, so the question
costs O(1) a job, never a scan of the lists:

  in an org's list        driftless:{fair:<lane>}:queued, a count per subject (fair.py's
                          push and pop, in one script with the list)
  popped, running         driftless:{fair:<lane>}:running:<subject> = its run
                          (the pop sets it, the job's end deletes it: worker/fair.py)
  in the broker           driftless:held:delayed:<subject>, until the job should have
                          started (a retry's countdown: shared/infra/queue.py)
  running from the broker driftless:held:running:<subject> = its run

A running mark counts only while its run's key lives (liveness.py): a run that ended,
or a worker killed mid-job, leaves a mark nobody beats for. The marks live in the Redis
of the lists, so a Redis restart loses them with the jobs, and the reconciler finds
those from PostgreSQL as before.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import redis

from shared.infra.fair import LANES, RUNNING_MS, queued_key, running_key, subject_of
from shared.infra.liveness import Heartbeat, alive_key

log = logging.getLogger(__name__)

# How long after its countdown a job sent to the broker may still be on its way: it
# waits for a free slot behind the tickets of its queue.
BROKER_MARGIN_S = 120.0
# A direct job that raised an error its task retries is back within Celery's backoff cap
# (worker/tasks.py, 60 s): held that long, plus the margin. One past its last retry is
# sent again by the reconciler once this lapses.
RETRY_HOLD_S = 60.0 + BROKER_MARGIN_S
_DELAYED = "driftless:held:delayed:"
_RUNNING = "driftless:held:running:"

# KEYS: a running mark, its run's alive key. ARGV: the run. The mark is deleted only if
# still the run's own.
_END_RUN = """
redis.call('DEL', KEYS[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


class HeldJobs:
    """The marks of model jobs held somewhere (the reconciler reads them; a job sent
    straight to the broker writes its own)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._end_run = client.register_script(_END_RUN)

    def unheld(self, task: str, topic_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """The topics whose `task` job nothing holds: lost, or never sent. Without Redis,
        all of them (a duplicate is harmless; a missing job is what we are here for)."""
        if not topic_ids:
            return []
        subjects = [subject_of(task, {"topic_id": str(t)}) for t in topic_ids]
        try:
            held = self.held(subjects)
        except redis.RedisError as exc:
            log.warning("held jobs unknown (%s); every candidate counts as lost", exc)
            return list(topic_ids)
        return [t for t, subject in zip(topic_ids, subjects, strict=True) if subject not in held]

    def held(self, subjects: Sequence[str]) -> set[str]:
        """The subjects a list, the broker or a live worker holds (two round trips)."""
        if not subjects:
            return set()
        with self._client.pipeline(transaction=False) as pipe:
            for lane in LANES:
                pipe.hmget(queued_key(lane), list(subjects))
                pipe.mget([running_key(lane, s) for s in subjects])
            pipe.mget([_RUNNING + s for s in subjects])
            pipe.mget([_DELAYED + s for s in subjects])
            results = pipe.execute()
        queued = results[0 : 2 * len(LANES) : 2]
        running = [*results[1 : 2 * len(LANES) : 2], results[-2]]
        delayed, now = results[-1], time.time()
        held = {
            subject
            for i, subject in enumerate(subjects)
            if any(int(counts[i] or 0) > 0 for counts in queued) or float(delayed[i] or 0) > now
        }
        runners: dict[str, set[str]] = {}
        for marks in running:
            for subject, runner in zip(subjects, marks, strict=True):
                if runner:
                    runners.setdefault(_text(runner) or "", set()).add(subject)
        for runner in self._alive(list(runners)):
            held |= runners[runner]
        return held

    def _alive(self, runners: list[str]) -> set[str]:
        if not runners:
            return set()
        with self._client.pipeline(transaction=False) as pipe:
            for runner in runners:
                pipe.exists(alive_key(runner))
            beating = pipe.execute()
        return {runner for runner, beats in zip(runners, beating, strict=True) if beats}

    def sent_delayed(self, subject: str, countdown_s: float) -> None:
        """A job went to the broker with a countdown: held until it should have started."""
        if subject:
            self._mark_delayed(subject, countdown_s + BROKER_MARGIN_S)

    def _mark_delayed(self, subject: str, hold_s: float) -> None:
        until = time.time() + hold_s
        try:
            self._client.set(_DELAYED + subject, until, px=max(1, int(hold_s * 1000)))
        except redis.RedisError as exc:  # at worst the reconciler sends it once more
            log.warning("held mark of %s not set: %s", subject, exc)

    @contextmanager
    def running(
        self, subject: str, heartbeat: Heartbeat, *, retried: Callable[[BaseException], bool]
    ) -> Iterator[None]:
        """A job from the broker runs in this process: held while its run beats, and, when
        it raised an error `retried` says its queue retries, until that retry is due (and
        a margin). Redis errors never fail the job."""
        if not subject:
            yield
            return
        run = heartbeat.begin()
        try:
            with self._client.pipeline(transaction=False) as pipe:
                pipe.set(alive_key(run), 1, px=heartbeat.ttl_ms)
                pipe.set(_RUNNING + subject, run, px=RUNNING_MS)
                pipe.delete(_DELAYED + subject)
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("held mark of %s not set: %s", subject, exc)
        try:
            yield
        except BaseException as exc:
            if retried(exc):
                self._mark_delayed(subject, RETRY_HOLD_S)  # before the running mark goes
            raise
        finally:
            heartbeat.end(run)  # whatever Redis says next, the run no longer beats
            try:
                self._end_run(keys=[_RUNNING + subject, alive_key(run)], args=[run])
            except redis.RedisError as exc:  # its run's key lapses: it is no longer beaten
                log.warning("held mark of %s not cleared: %s", subject, exc)


def forget_held(client: redis.Redis, tasks: Sequence[str], topic_ids: Sequence[uuid.UUID]) -> int:
    """Delete every mark naming these topics (user erasure); a job of theirs still in a
    list runs, finds nothing, and leaves no mark behind."""
    subjects = [subject_of(task, {"topic_id": str(t)}) for task in tasks for t in topic_ids]
    if not subjects:
        return 0
    with client.pipeline(transaction=False) as pipe:
        for lane in LANES:
            pipe.hdel(queued_key(lane), *subjects)
            for subject in subjects:
                pipe.delete(running_key(lane, subject))
        for subject in subjects:
            pipe.delete(_RUNNING + subject)
            pipe.delete(_DELAYED + subject)
        return sum(int(n) for n in pipe.execute())
