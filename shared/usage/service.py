"""The usage ledger: a row for every LLM call a worker makes, written as the call returns
or fails, and an org's totals since a moment (`GET /agents-api/usage`).

A row is written by the provider's `on_call` (`UsageLedger`, wired in shared/bootstrap.py),
in a short transaction of its own right after the call: the provider counted the call
whatever happens to the caller's own write later, and a task retried after a failure
that calls the model again made a second real call, with a second row.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, insert, select
from sqlalchemy.exc import SQLAlchemyError

from shared.domain.errors import Invalid
from shared.infra.db.uow import UnitOfWork
from shared.llm.base import LLMCall
from shared.usage.models import LLMUsage

log = logging.getLogger(__name__)

# `GET /agents-api/usage` without `since`: the last 30 days.
DEFAULT_WINDOW = dt.timedelta(days=30)

# Every LLM call writes one (the worker's hot path): a plain insert built once.
_INSERT_USAGE = insert(LLMUsage)


def record_llm_usage(*, uow: UnitOfWork, org_id: uuid.UUID, call: LLMCall) -> None:
    """The row of one call, charged to `org_id`."""
    uow.connection().execute(
        _INSERT_USAGE,
        {
            "org_id": org_id,
            "model": call.model,
            "purpose": call.purpose,
            "outcome": "error" if call.failed else "ok",
            "prompt_tokens": call.usage.prompt_tokens,
            "completion_tokens": call.usage.completion_tokens,
        },
    )


class UsageLedger:
    """A provider's `on_call`: each call's row, in a transaction of its own; never raises."""

    def __init__(self, new_uow: Callable[[], UnitOfWork]) -> None:
        self._new_uow = new_uow

    def __call__(self, call: LLMCall) -> None:
        if call.org_id is None:  # made for no topic (a benchmark): no org to charge
            return
        try:
            with self._new_uow() as uow:
                uow.one_statement()
                record_llm_usage(uow=uow, org_id=call.org_id, call=call)
                uow.commit()
        except SQLAlchemyError as exc:
            # The call was made and counted in the metrics; a missing row is a gap in
            # the ledger, not a reason to fail the summary (a retry would call again).
            log.warning(
                "could not record a %s call (%s) of org %s: %s",
                call.purpose, call.model, call.org_id, exc,
            )  # fmt: skip


@dataclass(frozen=True)
class Tally:
    """Calls and tokens of one model."""

    llm_calls: int
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class OrgUsage:
    """An org's LLM calls and tokens from `since` on, in all and by model."""

    since: dt.datetime
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    by_model: dict[str, Tally]
    # Its tokens this month are used up: set by shared/orgs/service.py, where budgets are.
    budget_exhausted: bool = False


def org_usage(*, uow: UnitOfWork, org_id: uuid.UUID, since: dt.datetime | None) -> OrgUsage:
    """The org's calls (failed ones too, with no tokens) made at or after `since`
    (default: DEFAULT_WINDOW ago), by model."""
    since = dt.datetime.now(dt.UTC) - DEFAULT_WINDOW if since is None else _in_utc(since)
    rows = uow.session.execute(
        select(
            LLMUsage.model,
            func.count(),
            func.coalesce(func.sum(LLMUsage.prompt_tokens), 0),
            func.coalesce(func.sum(LLMUsage.completion_tokens), 0),
        )
        .where(LLMUsage.org_id == org_id, LLMUsage.created_at >= since)
        .group_by(LLMUsage.model)
        .order_by(LLMUsage.model)
    )
    by_model = {model: Tally(int(calls), int(p), int(c)) for model, calls, p, c in rows}
    return OrgUsage(
        since=since,
        llm_calls=sum(t.llm_calls for t in by_model.values()),
        prompt_tokens=sum(t.prompt_tokens for t in by_model.values()),
        completion_tokens=sum(t.completion_tokens for t in by_model.values()),
        by_model=by_model,
    )


def _in_utc(since: dt.datetime) -> dt.datetime:
    """`since` in UTC: PostgreSQL refuses offsets past ±15:59 that Python accepts (+17:18)."""
    if since.tzinfo is None:
        raise Invalid("since: a timestamp needs a timezone (Z or ±hh:mm)")
    try:
        return since.astimezone(dt.UTC)
    except OverflowError:  # 9999-12-31T23:00-05:00 is in the year 10000, UTC
        raise Invalid(
            "since: out of range, it must fall within the years 1 to 9999 in UTC"
        ) from None
