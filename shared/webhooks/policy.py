"""The times a webhook delivery follows (DRIFTLESS_WEBHOOK_*), nested so that an attempt
still running is never claimed again and a job never outlives its slots: an attempt's
deadline < the job's hard time limit < the claim's lease (and the slots' hold)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

# A job goes on with its subscription's next due delivery while one more attempt ends,
# at its deadline, within this.
DRAIN_BUDGET_S = 30.0
# Around a job's attempts, for its queries and Redis calls: the hard time limit's margin.
JOB_MARGIN_S = 15.0
# Past the hard time limit, for the clocks of the workers that compare leases.
LEASE_MARGIN_S = 15.0


@dataclass(frozen=True)
class Policy:
    """The settings a delivery follows (DRIFTLESS_WEBHOOK_*)."""

    max_attempts: int
    backoff_s: float
    timeout_s: float
    allow_private: bool

    @property
    def time_limit_s(self) -> float:
        """The deliver_webhook job's hard time limit: its attempts (the first one, and more
        only while one ends at its deadline within DRAIN_BUDGET_S), and a margin."""
        return max(DRAIN_BUDGET_S, self.timeout_s) + JOB_MARGIN_S

    @property
    def lease(self) -> dt.timedelta:
        """How long a claim (and a slot) lasts: past the hard time limit of the job that
        took it, so it never ends while that job may still be attempting."""
        return dt.timedelta(seconds=self.time_limit_s + LEASE_MARGIN_S)
