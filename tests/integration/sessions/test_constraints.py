"""Invariants the database itself enforces, whatever the code above it does."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.exc import IntegrityError

from shared.auth.models import Org
from shared.facts.models import FactsDocument
from shared.infra.db.uow import UnitOfWork
from shared.notes.models import NotesDocument
from shared.sessions.service import create_session


def test_r23_one_active_notes_document_per_topic(uow: UnitOfWork) -> None:
    with uow:
        org = Org(name=f"o-{uuid.uuid4().hex[:8]}")
        uow.session.add(org)
        uow.session.flush()
        topic_id = create_session(uow=uow, org_id=org.id, agent_id="a", user_id="u").topics[0].id
        uow.session.add(NotesDocument(topic_id=topic_id, content="one", status="archived"))
        uow.session.add(NotesDocument(topic_id=topic_id, content="two", status="active"))
        uow.session.flush()  # archived documents may pile up beside one active one
        uow.session.add(NotesDocument(topic_id=topic_id, content="three", status="active"))
        with pytest.raises(IntegrityError, match="uq_notes_one_active_per_topic"):
            uow.session.flush()


def test_r22_one_facts_document_per_scope(uow: UnitOfWork) -> None:
    with uow:
        org = Org(name=f"o-{uuid.uuid4().hex[:8]}")
        uow.session.add(org)
        uow.session.flush()
        uow.session.add(FactsDocument(org_id=org.id, agent_id="a", user_id="u", document={}))
        uow.session.add(FactsDocument(org_id=org.id, agent_id="a", user_id="v", document={}))
        uow.session.flush()
        uow.session.add(FactsDocument(org_id=org.id, agent_id="a", user_id="u", document={}))
        with pytest.raises(IntegrityError, match="uq_facts_scope"):
            uow.session.flush()
