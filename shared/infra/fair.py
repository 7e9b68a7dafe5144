"""Fair share of the model: each org's model jobs wait in a list of their own, served in turn.

Celery's queues are FIFO: behind one org's 3,000 closed topics, every other org's close
waits for all of them. So a model job (a summary, an evaluation) does not travel in
the broker. It waits in its org's list in Redis, and the broker carries a *ticket*
(`next_model_job`, shared/infra/queue.py) that says only "serve the next job of this
lane". Whichever ticket a worker takes, it pops from the org at the head of the lane's
ring, and puts that org back at the tail if it has more: round robin across the orgs
with work waiting, FIFO within an org. An org with one job waits behind at most one job
of each other org, however long their lists are.

Keys of a lane (live or bulk) share a hash tag, so a Redis Cluster keeps them on one
slot and the scripts may touch an org's list they compute:
  driftless:{fair:<lane>}:ring        orgs with jobs waiting, each once, in serving order
  driftless:{fair:<lane>}:jobs:<org>  the org's jobs, oldest first (JSON)
An org is in the ring exactly when its list is not empty; both scripts keep that, and a
push and a pop are one round trip each. Tickets and jobs are one to one; a ticket that
finds nothing (its job served by an earlier ticket, or the lists lost with Redis) ends
at once, and a job whose ticket was lost gets one from the reconciler (`top_up`). Jobs
lost with Redis are found by the reconciler from PostgreSQL, as any lost job is.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import redis

Lane = Literal["live", "bulk"]
LANES: tuple[Lane, ...] = ("live", "bulk")
# The org of work no org owns (a fleet-wide job): it takes its turn like any org.
FLEET = "fleet"

# KEYS: ring, the org's list. ARGV: org, job. The org joins the ring when its list
# goes from empty to one job.
_PUSH = """
local n = redis.call('RPUSH', KEYS[2], ARGV[2])
if n == 1 then redis.call('RPUSH', KEYS[1], ARGV[1]) end
return n
"""

# KEYS: ring. ARGV: prefix of the orgs' lists. The org at the head gives its oldest job
# and goes to the tail if it has more. A ring entry whose list is gone (keys evicted)
# is dropped; a bounded number of them per call.
_POP = """
for _ = 1, 16 do
  local org = redis.call('LPOP', KEYS[1])
  if not org then return false end
  local list = ARGV[1] .. org
  local job = redis.call('LPOP', list)
  if job then
    if redis.call('LLEN', list) > 0 then redis.call('RPUSH', KEYS[1], org) end
    return job
  end
end
return false
"""

# KEYS: ring. ARGV: prefix, how many orgs to look at. Returns orgs waiting, jobs in the
# lists looked at, and the oldest of their head jobs' push times (or false).
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
return {redis.call('LLEN', KEYS[1]), jobs, oldest and tostring(oldest) or false}
"""
# A scrape looks at this many orgs at most: the gauges stay one bounded round trip.
WAITING_SCAN = 1000


@dataclass(frozen=True)
class FairJob:
    """A model job as it waits: the task to run, its arguments, its org, when it came."""

    task: str
    kwargs: dict[str, Any]
    org: str = FLEET
    pushed_at: float = field(default_factory=time.time)

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str | bytes) -> FairJob:
        data = json.loads(raw)
        return cls(task=data["task"], kwargs=data["kwargs"], org=data["org"],
                   pushed_at=float(data["pushed_at"]))  # fmt: skip


@dataclass(frozen=True)
class Waiting:
    """What a lane holds: orgs with jobs, jobs (of the first WAITING_SCAN orgs), and how
    long the oldest of them has waited (0 with none)."""

    orgs: int
    jobs: int
    oldest_s: float


def _ring(lane: Lane) -> str:
    return f"driftless:{{fair:{lane}}}:ring"


def _jobs_prefix(lane: Lane) -> str:
    return f"driftless:{{fair:{lane}}}:jobs:"


class FairQueue:
    """The per-org lists of model jobs of each lane, in one Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._push = client.register_script(_PUSH)
        self._pop = client.register_script(_POP)
        self._waiting = client.register_script(_WAITING)

    def push(self, lane: Lane, job: FairJob) -> None:
        """Add the job at the end of its org's list (one round trip)."""
        self._push(keys=[_ring(lane), _jobs_prefix(lane) + job.org], args=[job.org, job.encode()])

    def pop(self, lane: Lane) -> FairJob | None:
        """The next org's oldest job, None when the lane is empty (one round trip)."""
        raw = self._pop(keys=[_ring(lane)], args=[_jobs_prefix(lane)])
        return None if raw is None else FairJob.decode(raw)

    def waiting(self, lane: Lane, *, now: float | None = None) -> Waiting:
        orgs, jobs, oldest = self._waiting(
            keys=[_ring(lane)], args=[_jobs_prefix(lane), WAITING_SCAN]
        )
        if oldest is None:
            return Waiting(int(orgs), int(jobs), 0.0)
        waited = (time.time() if now is None else now) - float(oldest)
        return Waiting(int(orgs), int(jobs), max(0.0, waited))
