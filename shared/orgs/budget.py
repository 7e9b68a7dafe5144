"""Each org's LLM budget: model calls a minute, and tokens a calendar month (UTC).

An org's own limits (`driftless orgs set`, columns of `orgs`) or else the fleet's
(DRIFTLESS_ORG_LLM_RPM, DRIFTLESS_ORG_MONTHLY_TOKENS); 0 is no limit. The tokens used
are the usage ledger's (shared/usage/): every call's prompt and completion tokens since
the first of the month, UTC; the worker keeps them in Redis, reserved before each call
and settled after it (spend.py). At or past its tokens an org is *exhausted* until the month
turns: its summaries fall back (R14: never promoted) and drift is not asked
(budgeted_llm.py). The first call that finds it so records `org.budget_exhausted`, once
a month: a compare-and-set on `orgs.budget_exhausted_month`.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis
from sqlalchemy import func, or_, select, update

from shared.auth.models import Org
from shared.domain.errors import NotFound
from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import BUDGETS_EXHAUSTED, count_on_commit
from shared.orgs.spend import MonthlySpend, Reservation
from shared.usage.models import LLMUsage
from shared.webhooks.events import ORG_BUDGET_EXHAUSTED, record_event

log = logging.getLogger(__name__)

# How long a process trusts what it read of an org's limits (`driftless orgs set` shows
# within this); the tokens used are the fleet's count in Redis (spend.py), never cached.
CACHE_S = 10.0


@dataclass(frozen=True)
class BudgetDefaults:
    """The fleet's budget of an org without its own (0: no limit)."""

    llm_rpm: int
    monthly_tokens: int


@dataclass(frozen=True)
class Budget:
    """An org's LLM limits in effect (0: none) and the tokens it used this month."""

    llm_rpm: int
    monthly_tokens: int
    month: dt.date  # the first day of the month, UTC
    tokens_used: int

    @property
    def exhausted(self) -> bool:
        return 0 < self.monthly_tokens <= self.tokens_used


def month_of(now: dt.datetime) -> dt.date:
    """The first day of `now`'s calendar month in UTC: the budget's period."""
    return now.astimezone(dt.UTC).date().replace(day=1)


def month_start(month: dt.date) -> dt.datetime:
    return dt.datetime(month.year, month.month, 1, tzinfo=dt.UTC)


def org_limits(*, uow: UnitOfWork, org_id: uuid.UUID, defaults: BudgetDefaults) -> tuple[int, int]:
    """The org's LLM calls a minute and monthly tokens in effect (0: none)."""
    row = uow.session.execute(
        select(Org.llm_rpm, Org.monthly_tokens).where(Org.id == org_id)
    ).first()
    if row is None:
        raise NotFound(f"no org {org_id}")
    llm_rpm = defaults.llm_rpm if row.llm_rpm is None else row.llm_rpm
    monthly = defaults.monthly_tokens if row.monthly_tokens is None else row.monthly_tokens
    return llm_rpm, monthly


def tokens_used(*, uow: UnitOfWork, org_id: uuid.UUID, month: dt.date) -> int:
    """The org's tokens in the usage ledger since the first of `month`."""
    used = uow.session.scalar(
        select(
            func.coalesce(func.sum(LLMUsage.prompt_tokens + LLMUsage.completion_tokens), 0)
        ).where(LLMUsage.org_id == org_id, LLMUsage.created_at >= month_start(month))
    )
    return int(used or 0)


def org_budget(
    *, uow: UnitOfWork, org_id: uuid.UUID, defaults: BudgetDefaults, now: dt.datetime | None = None
) -> Budget:
    """The org's budget in effect and its tokens used since the first of `now`'s month."""
    llm_rpm, monthly = org_limits(uow=uow, org_id=org_id, defaults=defaults)
    month = month_of(now or dt.datetime.now(dt.UTC))
    return Budget(
        llm_rpm=llm_rpm,
        monthly_tokens=monthly,
        month=month,
        tokens_used=tokens_used(uow=uow, org_id=org_id, month=month),
    )


def note_exhausted(*, uow: UnitOfWork, org_id: uuid.UUID, budget: Budget) -> bool:
    """Mark the org out of tokens for `budget.month` and record `org.budget_exhausted`;
    False (nothing written) when it was already marked for that month or a later one."""
    marked = uow.session.execute(
        update(Org)
        .where(
            Org.id == org_id,
            or_(Org.budget_exhausted_month.is_(None), Org.budget_exhausted_month < budget.month),
        )
        .values(budget_exhausted_month=budget.month)
        .returning(Org.id)
    ).first()
    if marked is None:
        return False
    record_event(
        uow,
        org_id=org_id,
        type=ORG_BUDGET_EXHAUSTED,
        data={
            "month": budget.month.strftime("%Y-%m"),
            "monthlyTokens": budget.monthly_tokens,
            "tokensUsed": budget.tokens_used,
            "resetsAt": month_start(_next_month(budget.month)).isoformat(),
        },
    )
    count_on_commit(uow.session, BUDGETS_EXHAUSTED)
    return True


def _next_month(month: dt.date) -> dt.date:
    return dt.date(month.year + month.month // 12, month.month % 12 + 1, 1)


class Budgets:
    """A process's view of orgs' budgets: limits read at most every CACHE_S per org, the
    tokens used and reserved counted fleet-wide in Redis (spend.py)."""

    def __init__(
        self,
        new_uow: Callable[[], UnitOfWork],
        *,
        defaults: BudgetDefaults,
        redis_client: redis.Redis,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.defaults = defaults
        self._new_uow = new_uow
        self._cache_s = cache_s
        self._clock = clock
        self._lock = threading.Lock()  # a threaded worker's tasks share the cache
        self._read: dict[uuid.UUID, tuple[float, tuple[int, int]]] = {}
        self._noted: set[tuple[uuid.UUID, dt.date]] = set()
        self.spend = MonthlySpend(redis_client, seed=self._ledger_sum)

    def of(self, org_id: uuid.UUID) -> Budget:
        """The org's budget: its limits as read within CACHE_S, its tokens used this month."""
        llm_rpm, monthly = self._limits(org_id)
        month = month_of(dt.datetime.now(dt.UTC))
        used = self.spend.used(org_id, month)
        return Budget(llm_rpm=llm_rpm, monthly_tokens=monthly, month=month, tokens_used=used)

    def reserve(self, org_id: uuid.UUID, tokens: int) -> tuple[Budget, Reservation | None]:
        """The org's budget, and `tokens` reserved of its month if it has monthly tokens
        (None: it has none, nothing to reserve or settle)."""
        llm_rpm, monthly = self._limits(org_id)
        month = month_of(dt.datetime.now(dt.UTC))
        if monthly <= 0:
            return Budget(llm_rpm, monthly, month, tokens_used=0), None
        found = self.spend.reserve(
            org_id=org_id, month=month, monthly_tokens=monthly, tokens=tokens
        )
        return Budget(llm_rpm, monthly, month, tokens_used=found.used), found

    def settle(
        self, org_id: uuid.UUID, budget: Budget, reservation: Reservation, used: int
    ) -> None:
        """Give a call's reservation back and count the tokens it used."""
        self.spend.settle(org_id=org_id, month=budget.month, reservation=reservation, used=used)

    def _limits(self, org_id: uuid.UUID) -> tuple[int, int]:
        now = self._clock()
        with self._lock:
            cached = self._read.get(org_id)
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1]
        with self._new_uow() as uow:
            limits = org_limits(uow=uow, org_id=org_id, defaults=self.defaults)
        with self._lock:
            self._read[org_id] = (now, limits)
        return limits

    def _ledger_sum(self, org_id: uuid.UUID, month: dt.date) -> int:
        with self._new_uow() as uow:
            return tokens_used(uow=uow, org_id=org_id, month=month)

    def note_exhausted(self, org_id: uuid.UUID, budget: Budget) -> None:
        """Record the org's running out of tokens this month, unless already known."""
        if (org_id, budget.month) in self._noted:
            return
        with self._new_uow() as uow:
            first = note_exhausted(uow=uow, org_id=org_id, budget=budget)
            uow.commit()
        if first:
            log.warning(
                "org %s has used %d of its %d tokens for %s: fallback summaries, no drift,"
                " until the month turns",
                org_id, budget.tokens_used, budget.monthly_tokens, budget.month.strftime("%Y-%m"),
            )  # fmt: skip
        self._noted.add((org_id, budget.month))
