"""Fair share of the model: each org's model jobs wait in a list of their own, served in turn.

Celery's queues are FIFO: behind one org's 3,000 closed topics, every other org's close
waits for all of them. So a model job (a summary, an evaluation) does not travel in
the broker. It waits in its org's list in Redis, and the broker carries a *ticket*
(`next_model_job`, shared/infra/queue.py) that says only "serve the next job of this
lane". Whichever ticket a worker takes, it pops from the org at the head of the lane's
ring, and puts that org back at the tail if it has more: round robin across the orgs
with work waiting, FIFO within an org. An org with one job waits behind at most one job
of each other org, however long their lists are.

Keys of a lane (live or bulk) share a hash tag (one slot, were they ever on a Redis
Cluster, which driftless does not support: docs/deploy.md), and the scripts may touch
an org's list they compute:
  driftless:{fair:<lane>}:ring        orgs with jobs waiting, each once, in serving order
  driftless:{fair:<lane>}:jobs:<org>  the org's jobs, oldest first (JSON)
  driftless:{fair:<lane>}:queued      a job's subject -> how many of its jobs the lists hold
  driftless:{fair:<lane>}:running:<subject>  the worker process running it (popped)
An org is in the ring exactly when its list is not empty; both scripts keep that, and a
push and a pop are one round trip each. Tickets and jobs are one to one; a ticket that
finds nothing (its job served by an earlier ticket, or the lists lost with Redis) ends
at once, and a job whose ticket was lost gets one from the reconciler (`top_up`). Jobs
lost with Redis are found by the reconciler from PostgreSQL, as any lost job is.

The same scripts keep each job's *subject* (its task and topic) marked while a list
holds it or a worker runs it, so that the reconciler tells a backlog from lost work in
O(1) a job (shared/infra/held.py reads the marks).
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import redis

from shared.infra.liveness import alive_key

log = logging.getLogger(__name__)

Lane = Literal["live", "bulk"]
LANES: tuple[Lane, ...] = ("live", "bulk")
# The org of work no org owns (a fleet-wide job): it takes its turn like any org.
FLEET = "fleet"

# KEYS: ring, the org's list, the lane's queued marks. ARGV: org, job, its subject. The
# org joins the ring when its list goes from empty to one job.
_PUSH = """
local n = redis.call('RPUSH', KEYS[2], ARGV[2])
if n == 1 then redis.call('RPUSH', KEYS[1], ARGV[1]) end
if ARGV[3] ~= '' then redis.call('HINCRBY', KEYS[3], ARGV[3], 1) end
return n
"""

# KEYS: ring, the lane's fleet hold, parked tickets, queued marks. ARGV: prefix of the
# orgs' lists, prefix of their holds, prefix of their fleet marks, SKIPS, NEXT_LOOK_MS,
# TRIAL_MS, the trial's token, prefix of the running marks, the popping run, RUNNING_MS,
# the run's alive key and its lifetime (ms; shared/infra/liveness.py).
# The org at the head gives its oldest job and goes to the tail if it has more. An org that
# yields its turn (held, or marked as the fleet's model's while the fleet's quota is
# held) goes to the tail with its jobs. A marked org served once the hold lapsed takes
# the lane's *trial*: the hold again, for TRIAL_MS or until its call is granted
# (`end_trial`), so that the tickets of a refill do not race the next marked orgs to the
# bucket; its mark goes (a refusal sets it again). A ring entry whose list is gone (keys
# evicted) is dropped. At most SKIPS orgs are looked at. Returns {job or false, ms until
# one may be admissible (-1: none waits; 0: orgs not looked at remain), a parked ticket
# to send (0 or 1), 1 if the job holds the trial}.
_POP = """
local skipped, soonest = 0, false
local fleet_held = redis.call('PTTL', KEYS[2])
for _ = 1, tonumber(ARGV[4]) do
  local org = redis.call('LPOP', KEYS[1])
  if not org then break end
  local list = ARGV[1] .. org
  if redis.call('EXISTS', list) == 1 then
    local held = redis.call('PTTL', ARGV[2] .. org)
    local marked = held <= 0 and redis.call('EXISTS', ARGV[3] .. org) == 1
    if marked and fleet_held > 0 then held = fleet_held end
    if held > 0 then
      redis.call('RPUSH', KEYS[1], org)
      skipped = skipped + 1
      if not soonest or held < soonest then soonest = held end
    else
      local job = redis.call('LPOP', list)
      if redis.call('LLEN', list) > 0 then redis.call('RPUSH', KEYS[1], org) end
      local ok, decoded = pcall(cjson.decode, job)
      local subject = ok and type(decoded) == 'table' and decoded.subject
      if type(subject) == 'string' and subject ~= '' then
        if redis.call('HINCRBY', KEYS[4], subject, -1) <= 0 then
          redis.call('HDEL', KEYS[4], subject)
        end
        redis.call('SET', ARGV[8] .. subject, ARGV[9], 'PX', ARGV[10])
        if ARGV[9] ~= '' then redis.call('SET', ARGV[11], '1', 'PX', ARGV[12]) end
      end
      local release = 0
      if tonumber(redis.call('GET', KEYS[3]) or '0') > 0 then
        redis.call('DECR', KEYS[3])
        release = 1
      end
      if marked then
        redis.call('SET', KEYS[2], ARGV[7], 'PX', ARGV[6])
        redis.call('DEL', ARGV[3] .. org)
        return {job, 0, release, 1}
      end
      return {job, 0, release, 0}
    end
  end
end
if redis.call('LLEN', KEYS[1]) > skipped then
  return {false, math.min(soonest or 0, tonumber(ARGV[5])), 0, 0}
end
if not soonest then
  -- No job waits: any ticket still parked is a spare one (a reconciler's top-up).
  redis.call('DEL', KEYS[3])
  return {false, -1, 0, 0}
end
return {false, soonest, 0, 0}
"""
# Orgs a pop looks at, at most: the skipping of orgs that yield is bounded per pop.
SKIPS = 16
# A running mark outlives any run: a task's hard time limit is 300 s (worker/app.py). The
# process's heartbeat, not this, is what tells a killed worker's jobs (held.py); the
# expiry only clears the marks a dead process left.
RUNNING_MS = 2 * 300 * 1000
# The longest a trial holds the fleet's marked orgs back: from a pop to its call's turn at
# the bucket (a job that never asks ends it when it ends: worker/fair.py).
TRIAL_MS = 5000

# KEYS: the lane's fleet hold. ARGV: the trial's token. Ends this trial, never a hold a
# refusal set meanwhile or a later trial.
_END_TRIAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: ring, the org's list, its hold (or the lane's fleet hold), its fleet mark, queued
# marks, the job's running mark. ARGV: org, job, hold ms, fleet mark ms, 1 if the fleet's
# quota refused it, its subject, the process that ran it. The job goes back to the head
# of its org's list (marked queued again, no longer running), the org back to the ring's
# head if it had left it (its turn kept), and the org (or the lane's fleet-model orgs)
# holds for the given time.
_YIELD = """
if redis.call('LPUSH', KEYS[2], ARGV[2]) == 1 then redis.call('LPUSH', KEYS[1], ARGV[1]) end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
if ARGV[5] == '1' then redis.call('SET', KEYS[4], '1', 'PX', ARGV[4]) end
if ARGV[6] ~= '' then
  redis.call('HINCRBY', KEYS[5], ARGV[6], 1)
  if redis.call('GET', KEYS[6]) == ARGV[7] then redis.call('DEL', KEYS[6]) end
end
return 1
"""

# KEYS: the lane's waker mark, parked tickets. ARGV: ms until an org may be admissible.
# The first ticket to find nothing admissible is the waker (sent back with that
# countdown); the others are parked, counted, and sent again one by one as jobs are
# served. Returns 1 for the waker.
_PARK = """
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 1 end
redis.call('INCR', KEYS[2])
return 0
"""
# KEYS: parked tickets, the run's alive key, the job's running mark (or none). ARGV: the
# run. A job ended: its run's key and its running mark go (unless another run holds it
# by now), and a parked ticket is taken back (1) if any waits.
_DONE = """
redis.call('DEL', KEYS[2])
if KEYS[3] and redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
if tonumber(redis.call('GET', KEYS[1]) or '0') <= 0 then return 0 end
redis.call('DECR', KEYS[1])
return 1
"""
# A pop that looked at SKIPS orgs, all holding, while others remain: the waker comes back
# at most this soon to look at the next ones.
NEXT_LOOK_MS = 100
# How long an org marked as one of the fleet's model's stays marked: it yields its turn
# while the fleet's quota is held, as long as it has been refused by it lately.
FLEET_MARK_MS = 10 * 60 * 1000

# KEYS: ring, parked tickets. ARGV: prefix, how many orgs to look at. Returns orgs
# waiting, jobs in the lists looked at, the oldest of their head jobs' push times (or
# false), and the tickets parked.
_WAITING = """
local orgs = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local jobs, oldest = 0, false
for _, org in ipairs(orgs) do
  local list = ARGV[1] .. org
  jobs = jobs + redis.call('LLEN', list)
  local head = redis.call('LINDEX', list, 0)
  if head then
    local pushed = tonumber(cjson.decode(head).pushed_at)
    if pushed and (not oldest or pushed < oldest) then oldest = pushed end
  end
end
return {redis.call('LLEN', KEYS[1]), jobs, oldest and tostring(oldest) or false,
        tonumber(redis.call('GET', KEYS[2]) or '0')}
"""
# A scrape looks at this many orgs at most: the gauges stay one bounded round trip.
WAITING_SCAN = 1000


def subject_of(task: str, kwargs: dict[str, Any]) -> str:
    """What a model job works on: its task and topic (two jobs of one subject do the same
    work; the second finds it done). "" for a job without a topic."""
    topic_id = kwargs.get("topic_id")
    return f"{task}:{topic_id}" if topic_id else ""


@dataclass(frozen=True)
class FairJob:
    """A model job as it waits: the task to run, its arguments, its org, when it came."""

    task: str
    kwargs: dict[str, Any]
    org: str = FLEET
    pushed_at: float = field(default_factory=time.time)
    # The trace it belongs to (W3C traceparent, tracestate; empty when not traced): the job
    # waits here, where no message header goes, and the span that runs it continues the
    # trace of the request that caused it (shared/infra/tracing.py).
    trace: dict[str, str] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        return subject_of(self.task, self.kwargs)

    def encode(self) -> str:
        # The subject rides along for the pop's script, which marks it running.
        return json.dumps({**asdict(self), "subject": self.subject}, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str | bytes) -> FairJob:
        data = json.loads(raw)
        # A job pushed before traces were carried has none.
        return cls(task=data["task"], kwargs=data["kwargs"], org=data["org"],
                   pushed_at=float(data["pushed_at"]), trace=data.get("trace") or {})  # fmt: skip


@dataclass(frozen=True)
class Waiting:
    """What a lane holds: orgs with jobs, jobs (of the first WAITING_SCAN orgs), and how
    long the oldest of them has waited (0 with none)."""

    orgs: int
    jobs: int
    oldest_s: float
    parked: int = 0


def _ring(lane: Lane) -> str:
    return f"driftless:{{fair:{lane}}}:ring"


def _jobs_prefix(lane: Lane) -> str:
    return f"driftless:{{fair:{lane}}}:jobs:"


def _key(lane: Lane, name: str) -> str:
    return f"driftless:{{fair:{lane}}}:{name}"


def queued_key(lane: Lane) -> str:
    """The lane's hash of subjects its lists hold, with how many jobs of each."""
    return _key(lane, "queued")


def running_key(lane: Lane, subject: str) -> str:
    """A popped job's mark while it runs: the process running it."""
    return _key(lane, "running:") + subject


@dataclass(frozen=True)
class Turn:
    """What a ticket found: a job, or how long until one may be admissible (None: the
    lane is empty), and whether it frees a parked ticket (send one more)."""

    job: FairJob | None
    retry_in_s: float | None = None
    release: bool = False
    trial: str | None = None  # the token of the lane's fleet trial the job holds (`end_trial`)


class FairQueue:
    """The per-org lists of model jobs of each lane, in one Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._push = client.register_script(_PUSH)
        self._pop = client.register_script(_POP)
        self._yield = client.register_script(_YIELD)
        self._park = client.register_script(_PARK)
        self._done = client.register_script(_DONE)
        self._end_trial = client.register_script(_END_TRIAL)
        self._waiting = client.register_script(_WAITING)

    @property
    def client(self) -> redis.Redis:
        return self._client

    def push(self, lane: Lane, job: FairJob) -> None:
        """Add the job at the end of its org's list, its subject marked queued (one round trip)."""
        self._push(
            keys=[_ring(lane), _jobs_prefix(lane) + job.org, queued_key(lane)],
            args=[job.org, job.encode(), job.subject],
        )

    def pop(self, lane: Lane) -> FairJob | None:
        """The next admissible org's oldest job, None when none is (one round trip)."""
        return self.take(lane).job

    def take(self, lane: Lane, *, runner: str = "", alive_ms: int = 0) -> Turn:
        """The next admissible org's oldest job, or how long until one may be (one round
        trip). The job's subject is marked running by `runner`, a run whose key the pop
        sets alive for `alive_ms` and its process beats for (shared/infra/liveness.py)
        until `done`."""
        token = f"trial:{uuid.uuid4().hex}"
        raw, wait_ms, release, trial = self._pop(
            keys=[_ring(lane), _key(lane, "fleet-held"), _key(lane, "parked"), queued_key(lane)],
            args=[
                _jobs_prefix(lane),
                _key(lane, "held:"),
                _key(lane, "fleet:"),
                SKIPS,
                NEXT_LOOK_MS,
                TRIAL_MS,
                token,
                running_key(lane, ""),
                runner,
                RUNNING_MS,
                alive_key(runner),
                max(1, alive_ms),
            ],
        )
        if raw:
            return Turn(FairJob.decode(raw), release=bool(release), trial=token if trial else None)
        return Turn(None, retry_in_s=None if int(wait_ms) < 0 else int(wait_ms) / 1000)

    def yield_turn(
        self, lane: Lane, job: FairJob, *, hold_s: float, fleet: bool, runner: str = ""
    ) -> None:
        """Put a job its quota refused back at the head of its org's list, and hold the org
        (`fleet`: every org refused by the fleet's quota lately) for `hold_s`."""
        held = _key(lane, "fleet-held") if fleet else _key(lane, "held:") + job.org
        mark = _key(lane, "fleet:") + job.org  # a key of the lane's slot either way
        self._yield(
            keys=[
                _ring(lane), _jobs_prefix(lane) + job.org, held, mark, queued_key(lane),
                running_key(lane, job.subject),
            ],
            args=[
                job.org, job.encode(), max(1, math.ceil(hold_s * 1000)), FLEET_MARK_MS,
                1 if fleet else 0, job.subject, runner,
            ],
        )  # fmt: skip

    def end_trial(self, lane: Lane, token: str) -> None:
        """The trial's call was granted (or its job ended): the marked orgs may try again.
        Never raises: it runs inside a model call and after a job, and a trial Redis
        could not end lapses on its own within TRIAL_MS."""
        try:
            self._end_trial(keys=[_key(lane, "fleet-held")], args=[token])
        except redis.RedisError as exc:
            log.warning("fair queue %s: the fleet trial not ended, it lapses: %s", lane, exc)

    def park(self, lane: Lane, *, wait_s: float) -> bool:
        """A ticket that found nothing admissible: True if it is to wake the lane in
        `wait_s` (send it back with that countdown), False if it was parked."""
        woken = self._park(
            keys=[_key(lane, "waker"), _key(lane, "parked")],
            args=[max(1, math.ceil(wait_s * 1000))],
        )
        return bool(woken)

    def done(self, lane: Lane, job: FairJob | None = None, *, runner: str = "") -> bool:
        """A job ended (ran, failed, or went back to the broker): its running mark goes.
        True if a parked ticket was taken back (the caller sends it): the job's org's
        slot is free again."""
        keys = [_key(lane, "parked"), alive_key(runner)]
        if job is not None and job.subject:
            keys.append(running_key(lane, job.subject))
        return bool(self._done(keys=keys, args=[runner]))

    def waiting(self, lane: Lane, *, now: float | None = None) -> Waiting:
        orgs, jobs, oldest, parked = self._waiting(
            keys=[_ring(lane), _key(lane, "parked")], args=[_jobs_prefix(lane), WAITING_SCAN]
        )
        if oldest is None:
            return Waiting(int(orgs), int(jobs), 0.0, int(parked))
        waited = (time.time() if now is None else now) - float(oldest)
        return Waiting(int(orgs), int(jobs), max(0.0, waited), int(parked))
