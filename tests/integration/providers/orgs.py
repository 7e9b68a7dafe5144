"""Orgs for the bring-your-own-key tests: one on the fleet's model, or one that set its own
model on a scripted server (tests/llm_server.py)."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.infra.sealing import SecretBox
from shared.providers.service import set_provider
from tests.llm_server import FakeOpenAI
from tests.services import SEALING_KEY

BOX = SecretBox(SEALING_KEY)


def new_uow(factory: sessionmaker[Session]) -> UnitOfWork:
    return UnitOfWork(factory, RecordingQueue())


def new_org(
    factory: sessionmaker[Session], *, server: FakeOpenAI | None, model: str = "org-model"
) -> uuid.UUID:
    """A committed org; with `server`, its own model there (`model`, key `sk-own`)."""
    with new_uow(factory) as uow:
        org = Org(name=f"org-{uuid.uuid4().hex[:8]}")
        uow.session.add(org)
        uow.session.flush()
        if server is not None:
            set_provider(
                uow=uow, org_id=org.id, base_url=server.base_url, api_key="sk-own", model=model,
                box=BOX, allow_private=True,
            )  # fmt: skip
        uow.commit()
        return org.id
