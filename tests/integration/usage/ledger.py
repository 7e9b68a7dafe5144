"""Reading the usage ledger back in tests: an org's rows, oldest first."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.usage.models import LLMUsage

Row = tuple[Any, ...]  # model, purpose, outcome, prompt and completion tokens


def rows_of(factory: sessionmaker[Session], org_id: uuid.UUID) -> list[Row]:
    columns = (
        LLMUsage.model,
        LLMUsage.purpose,
        LLMUsage.outcome,
        LLMUsage.prompt_tokens,
        LLMUsage.completion_tokens,
    )
    with UnitOfWork(factory, RecordingQueue()) as uow:
        found = uow.session.execute(
            select(*columns).where(LLMUsage.org_id == org_id).order_by(LLMUsage.id)
        )
        return [tuple(row) for row in found]
