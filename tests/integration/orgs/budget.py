"""Giving an org an LLM budget and spending it, in tests."""

from __future__ import annotations

import uuid

from sqlalchemy import text, update
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.base import LLMCall, Usage
from shared.usage.service import record_llm_usage


def give_budget(
    factory: sessionmaker[Session],
    org_id: uuid.UUID,
    *,
    llm_rpm: int | None = None,
    monthly_tokens: int | None = None,
) -> None:
    """The org's own LLM limits, as `driftless orgs set` writes them."""
    with UnitOfWork(factory, RecordingQueue()) as uow:
        uow.session.execute(
            update(Org)
            .where(Org.id == org_id)
            .values(llm_rpm=llm_rpm, monthly_tokens=monthly_tokens)
        )
        uow.commit()


def spend(
    factory: sessionmaker[Session], org_id: uuid.UUID, tokens: int, *, months_ago: int = 0
) -> None:
    """A call's row of `tokens` in the org's ledger; `months_ago` backdates it."""
    call = LLMCall(
        org_id=org_id, model="m", purpose="summarize", failed=False, usage=Usage(tokens, 0)
    )
    with UnitOfWork(factory, RecordingQueue()) as uow:
        record_llm_usage(uow=uow, org_id=org_id, call=call)
        if months_ago:
            uow.session.execute(
                text(
                    "UPDATE llm_usage SET created_at = now() - make_interval(months => :months)"
                    " WHERE id = (SELECT max(id) FROM llm_usage WHERE org_id = :org)"
                ),
                {"months": months_ago, "org": org_id},
            )
        uow.commit()
