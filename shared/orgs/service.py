"""Operators' overrides of an org's limits (`driftless orgs set`), and the limits an org
reads back (`GET /agents-api/limits`)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select

from shared.auth.models import Org
from shared.domain.errors import Invalid, NotFound
from shared.infra.db.uow import UnitOfWork
from shared.orgs.budget import BudgetDefaults, org_budget
from shared.orgs.ratelimit import RequestLimit
from shared.usage.service import OrgUsage, org_usage

# Passed for a limit to give the org the fleet's default again (NULL in its row).
DEFAULT = "default"


@dataclass(frozen=True)
class OrgLimits:
    """An org's own limits; None: the fleet's default."""

    name: str
    requests_per_s: float | None
    request_burst: int | None
    llm_rpm: int | None = None
    monthly_tokens: int | None = None


def _whole(value: Any, *, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def set_limits(
    *, uow: UnitOfWork, org_name: str, requests_per_s: float | str | None = None,
    request_burst: int | str | None = None, llm_rpm: int | str | None = None,
    monthly_tokens: int | str | None = None,
) -> OrgLimits:  # fmt: skip
    """Set the org's limits, each a number, DEFAULT (the fleet's), or None (unchanged);
    returns its limits as they now are."""
    org = uow.session.scalar(select(Org).where(Org.name == org_name).with_for_update())
    if org is None:
        raise NotFound(f"no org named {org_name!r}")
    if requests_per_s is not None:
        if requests_per_s != DEFAULT and (
            not isinstance(requests_per_s, int | float) or not 0 <= requests_per_s < float("inf")
        ):
            raise Invalid("requests a second: a number, 0 or more (0: no limit), or 'default'")
        org.requests_per_s = None if requests_per_s == DEFAULT else float(requests_per_s)
    if request_burst is not None:
        if request_burst != DEFAULT and not _whole(request_burst, least=1):
            raise Invalid("request burst: a whole number, 1 or more, or 'default'")
        org.request_burst = None if request_burst == DEFAULT else int(request_burst)
    if llm_rpm is not None:
        # The column is an integer: past 2**31 - 1 is refused here, not by PostgreSQL.
        if llm_rpm != DEFAULT and not (_whole(llm_rpm, least=0) and int(llm_rpm) < 2**31):
            raise Invalid(
                "LLM calls a minute: a whole number, 0 or more (0: no limit), or 'default'"
            )
        org.llm_rpm = None if llm_rpm == DEFAULT else int(llm_rpm)
    if monthly_tokens is not None:
        if monthly_tokens != DEFAULT and not (
            _whole(monthly_tokens, least=0) and int(monthly_tokens) < 2**63
        ):
            raise Invalid("monthly tokens: a whole number, 0 or more (0: no limit), or 'default'")
        org.monthly_tokens = None if monthly_tokens == DEFAULT else int(monthly_tokens)
    uow.session.flush()
    return OrgLimits(
        org.name, org.requests_per_s, org.request_burst, org.llm_rpm, org.monthly_tokens
    )


@dataclass(frozen=True)
class EffectiveLimits:
    """The limits an org is held to now (its own or the fleet's; 0: none), and its
    tokens this month against its monthly budget."""

    requests_per_s: float
    request_burst: int
    llm_rpm: int
    monthly_tokens: int
    month: str  # the budget's calendar month (UTC), "2026-12"
    tokens_used: int
    budget_exhausted: bool


def limits_of(
    *, uow: UnitOfWork, org_id: uuid.UUID, requests: RequestLimit, budget: BudgetDefaults
) -> EffectiveLimits:
    """The org's limits in effect, given the fleet's defaults."""
    row = uow.session.execute(
        select(Org.requests_per_s, Org.request_burst).where(Org.id == org_id)
    ).one()
    spent = org_budget(uow=uow, org_id=org_id, defaults=budget)
    return EffectiveLimits(
        requests_per_s=requests.per_s if row.requests_per_s is None else row.requests_per_s,
        request_burst=requests.burst if row.request_burst is None else row.request_burst,
        llm_rpm=spent.llm_rpm,
        monthly_tokens=spent.monthly_tokens,
        month=f"{spent.month:%Y-%m}",
        tokens_used=spent.tokens_used,
        budget_exhausted=spent.exhausted,
    )


def usage_with_budget(
    *, uow: UnitOfWork, org_id: uuid.UUID, since: dt.datetime | None, budget: BudgetDefaults
) -> OrgUsage:
    """The org's LLM usage since `since`, saying whether its monthly tokens are used up."""
    usage = org_usage(uow=uow, org_id=org_id, since=since)
    exhausted = org_budget(uow=uow, org_id=org_id, defaults=budget).exhausted
    return replace(usage, budget_exhausted=exhausted)
