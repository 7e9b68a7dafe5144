"""Connection limits: an exhausted pool answers 503, and bounded transactions give up."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.auth.service import create_api_key
from shared.config import Settings
from shared.db.engine import bound_transactions, make_engine, make_session_factory
from shared.db.uow import UnitOfWork
from shared.queue import RecordingQueue


def test_an_exhausted_pool_answers_503_naming_overload_then_recovers(
    settings: Settings, database_url: str
) -> None:
    from web.app import create_app

    engine = make_engine(database_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    app = create_app(settings, queue=RecordingQueue(), session_factory=make_session_factory(engine))
    client = app.test_client()
    headers = {"Authorization": "Bearer dl_not-a-real-key"}
    try:
        with engine.connect():  # the pool's only connection, held by "another request"
            busy = client.get("/agents-api/scopes", headers=headers)
        body: Any = busy.json
        assert busy.status_code == 503
        assert body["error"]["code"] == "unavailable" and "overloaded" in body["error"]["message"]
        # The connection is back: the same process answers normally (401: the key is fake).
        assert client.get("/agents-api/scopes", headers=headers).status_code == 401
    finally:
        engine.dispose()


def test_a_bounded_transaction_gives_up_on_a_held_row_lock_and_a_runaway_statement(
    database_url: str, committed_factory: sessionmaker[Session]
) -> None:
    """What keeps a worker thread (no Celery time limit under the threads pool) from
    waiting for good: the error is an OperationalError, which the tasks retry."""
    name = f"locked-{uuid.uuid4().hex[:12]}"
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        create_api_key(uow=uow, org_name=name)
        uow.commit()
        org_id = uow.session.scalar(select(Org.id).where(Org.name == name))
    bounded = make_engine(database_url, pool_size=1, max_overflow=0)
    bound_transactions(bounded, lock_timeout_s=0.2, statement_timeout_s=0.5)
    lock = text("SELECT id FROM orgs WHERE id = :id FOR UPDATE")
    try:
        with committed_factory() as holder:
            holder.execute(lock, {"id": org_id})  # held until this block ends
            with bounded.connect() as connection, pytest.raises(OperationalError) as waited:
                connection.execute(lock, {"id": org_id})
        assert "lock timeout" in str(waited.value)
        with bounded.connect() as connection, pytest.raises(OperationalError) as ran:
            connection.execute(text("SELECT pg_sleep(5)"))
        assert "statement timeout" in str(ran.value)
        with bounded.connect() as connection:  # the pool's connection is still good
            assert connection.execute(text("SELECT 1")).scalar() == 1
    finally:
        bounded.dispose()
