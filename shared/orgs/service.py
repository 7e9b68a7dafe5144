"""Operators' overrides of an org's limits (`driftless orgs set`), and the limits an org
reads back (`GET /agents-api/limits`)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, replace

from sqlalchemy import select

from shared.auth.models import Org
from shared.domain.errors import NotFound
from shared.domain.limits import ORG_LIMITS
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


def set_limits(
    *, uow: UnitOfWork, org_name: str, requests_per_s: float | str | None = None,
    request_burst: int | str | None = None, llm_rpm: int | str | None = None,
    monthly_tokens: int | str | None = None,
) -> OrgLimits:  # fmt: skip
    """Set the org's limits, each a number within its ORG_LIMITS range, DEFAULT (the
    fleet's), or None (unchanged); returns its limits as they now are. A refused value
    writes nothing."""
    given = {
        "requests_per_s": requests_per_s, "request_burst": request_burst,
        "llm_rpm": llm_rpm, "monthly_tokens": monthly_tokens,
    }  # fmt: skip
    values = {
        name: None if value == DEFAULT else ORG_LIMITS[name].check(value)
        for name, value in given.items()
        if value is not None
    }
    org = uow.session.scalar(select(Org).where(Org.name == org_name).with_for_update())
    if org is None:
        raise NotFound(f"no org named {org_name!r}")
    for name, value in values.items():
        if value is not None:
            value = int(value) if ORG_LIMITS[name].whole else float(value)
        setattr(org, name, value)
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
