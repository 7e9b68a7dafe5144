"""Any LLM, within each org's budget (budget.py): the outermost wrapper of the worker's LLM.

- A call of an org with monthly tokens reserves its estimate first and settles with the
  provider's usage after (spend.py). Past its tokens this month, a call of the org's is
  refused before it reaches the model, with `BudgetExhausted`: an `LLMError`, so a
  summary gets R14's fallback (never promoted) and drift detection answers "no drift",
  as for any failed call. One whose estimate does not fit beside the org's calls in
  flight raises the org's `RateLimited`: its org yields its turn until they settle.
- Within them, the call first takes from the org's own calls-a-minute bucket in Redis
  (the fleet limiter's, shared/llm/ratelimit.py, keyed by org): it waits its turn, or,
  past the wait limit, raises `RateLimited`, which the worker retries like the fleet's.
- A call of no org's (a benchmark) is neither counted nor limited.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import redis

from shared.infra.metrics import LIMIT_HITS
from shared.llm.base import LLM, Completion, DriftRequest, LLMError, SummaryRequest
from shared.llm.ratelimit import (
    DEFAULT_MAX_WAIT_S,
    Limits,
    RateLimited,
    TokenBucket,
    drift_estimate,
    summary_estimate,
    wait_for_room,
)
from shared.orgs.budget import Budget, Budgets
from shared.orgs.spend import Admission

# An org whose calls in flight hold its last tokens yields its turn this long at most
# (a call of its ending sends a parked ticket sooner: worker/fair.py).
SETTLE_WAIT_S = 1.0


class BudgetExhausted(LLMError):
    """The org has used its tokens for this month: no call until the month turns."""


def org_bucket_name(org_id: uuid.UUID) -> str:
    return f"org:{org_id}"


def _pause(seconds: float) -> None:
    # Looked up at each call: under a gevent worker `time.sleep` is gevent's (patched).
    time.sleep(seconds)


class BudgetedLLM:
    """`inner`, with each call of an org held to that org's LLM budget."""

    def __init__(
        self,
        inner: LLM,
        *,
        budgets: Budgets,
        redis_client: redis.Redis,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        sleep: Callable[[float], None] = _pause,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.model = inner.model
        self.budgets = budgets
        self.max_wait_s = max_wait_s
        self._redis = redis_client
        self._sleep = sleep
        self._clock = clock

    def summarize(self, request: SummaryRequest) -> Completion:
        return self._call(
            request.org_id, lambda: self.inner.summarize(request), summary_estimate(request)
        )

    def detect_drift(self, request: DriftRequest) -> Completion:
        return self._call(
            request.org_id, lambda: self.inner.detect_drift(request), drift_estimate(request)
        )

    def _call(
        self, org_id: uuid.UUID | None, call: Callable[[], Completion], estimate: int
    ) -> Completion:
        if org_id is None:
            return call()
        budget, found = self.budgets.reserve(org_id, estimate)
        if found is not None and found.admission is not Admission.RESERVED:
            self._refuse(org_id, budget, exhausted=found.admission is Admission.EXHAUSTED)
        used = 0
        try:
            if budget.llm_rpm > 0:
                self._admit(org_id, budget.llm_rpm)
            completion = call()
            used = completion.usage.prompt_tokens + completion.usage.completion_tokens
        finally:
            # A failed call gives its reservation back: the ledger has what it reported.
            if found is not None:
                self.budgets.settle(org_id, budget, found, used)
        return completion

    def _refuse(self, org_id: uuid.UUID, budget: Budget, *, exhausted: bool) -> None:
        if not exhausted:
            raise RateLimited(
                f"org {org_id}'s calls in flight hold the last of its {budget.monthly_tokens}"
                f" tokens for {budget.month:%Y-%m}",
                retry_after_s=SETTLE_WAIT_S,
                fleet=False,
            )
        LIMIT_HITS.labels("monthly_tokens").inc()
        self.budgets.note_exhausted(org_id, budget)
        raise BudgetExhausted(
            f"org {org_id} has used its {budget.monthly_tokens} tokens for"
            f" {budget.month:%Y-%m}; no model call until the month turns (UTC)"
        )

    def _admit(self, org_id: uuid.UUID, rpm: int) -> None:
        """Wait for room in the org's calls a minute, or raise `RateLimited` (counted)."""
        try:
            waited_s = wait_for_room(
                self._bucket(org_id, rpm), 0, max_wait_s=self.max_wait_s,
                what=f"org {org_id}'s LLM calls a minute ({rpm}) are used up", fleet=False,
                sleep=self._sleep, clock=self._clock,
            )  # fmt: skip
        except RateLimited:
            LIMIT_HITS.labels("llm_rpm").inc()
            raise
        if waited_s > 0:
            LIMIT_HITS.labels("llm_rpm").inc()

    def _bucket(self, org_id: uuid.UUID, rpm: int) -> TokenBucket:
        # The fleet limiter's bucket with only its requests dimension, in Redis by org:
        # every worker shares it, and a new limit (`driftless orgs set`) applies at once.
        # Built per call: it holds no connection, and a cache would grow with the orgs.
        limits = Limits(rpm=rpm, tpm=0)
        return TokenBucket(self._redis, name=org_bucket_name(org_id), limits=limits)
