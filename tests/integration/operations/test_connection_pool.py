"""Connection limits: an exhausted pool answers 503, and bounded transactions give up."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from freezegun import freeze_time
from sqlalchemy import event, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.auth.service import create_api_key
from shared.infra.config import Settings
from shared.infra.db.engine import (
    PING_IDLE_S,
    bound_transactions,
    make_engine,
    make_session_factory,
)
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue


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


# --- dead pooled connections (shared/infra/db/engine.py ping_idle_connections) -----------------


def _backend_pid(engine: Any) -> int:
    with engine.connect() as connection:
        pid: int = connection.scalar(text("SELECT pg_backend_pid()"))
        return pid


def _terminate(database_url: str, pid: int) -> None:
    killer = make_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with killer.connect() as connection:
            assert connection.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        killer.dispose()


def test_a_pooled_connection_that_died_while_idle_is_replaced_unseen(database_url: str) -> None:
    """What pool_pre_ping did, kept: after a restart or an idle cut, requests just work."""
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    try:
        dead = _backend_pid(engine)
        _terminate(database_url, dead)
        with freeze_time(datetime.now(UTC)) as clock:
            clock.tick(PING_IDLE_S + 1)  # it sat in the pool: it is pinged, found dead
            assert _backend_pid(engine) != dead  # no error reached the caller
    finally:
        engine.dispose()


def test_a_connection_back_from_a_request_just_now_is_not_pinged_again(
    database_url: str,
) -> None:
    """The trade: a connection that answered under a second ago is trusted (no round
    trip per request). Killed in that second, it fails one caller, and the pool heals."""
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with freeze_time(datetime.now(UTC)):  # no time passes between the two checkouts
            dead = _backend_pid(engine)
            _terminate(database_url, dead)
            with pytest.raises(OperationalError):
                _backend_pid(engine)  # not pinged: the dead connection is used, and fails
            assert _backend_pid(engine) != dead  # SQLAlchemy replaced it
    finally:
        engine.dispose()


def test_a_bounded_transaction_sends_its_bounds_with_its_first_statement(
    database_url: str,
) -> None:
    """The SET LOCALs cost no round trip of their own: they go in front of the
    transaction's first statement, once; an executemany gets them sent before it."""
    bounded = make_engine(database_url, pool_size=1, max_overflow=0)
    bound_transactions(bounded, lock_timeout_s=0.2, statement_timeout_s=0.5)
    sent: list[str] = []
    event.listen(
        bounded, "after_cursor_execute", lambda _c, _cur, statement, *_rest: sent.append(statement)
    )
    try:
        with bounded.begin() as connection:
            assert connection.exec_driver_sql("SHOW statement_timeout").scalar() == "500ms"
            assert connection.exec_driver_sql("SHOW lock_timeout").scalar() == "200ms"
        assert len(sent) == 2
        assert sent[0].startswith("SET LOCAL lock_timeout = '200ms';")
        assert sent[0].endswith("; SHOW statement_timeout")
        assert sent[1] == "SHOW lock_timeout"

        sent.clear()
        with bounded.begin() as connection:
            connection.exec_driver_sql("CREATE TEMPORARY TABLE bounded_rows (n int)")
        with bounded.begin() as connection:  # a transaction that starts with executemany
            connection.exec_driver_sql(
                "INSERT INTO bounded_rows (n) VALUES (%(n)s)", [{"n": 1}, {"n": 2}]
            )
            assert connection.exec_driver_sql("SHOW statement_timeout").scalar() == "500ms"
            assert connection.exec_driver_sql("SELECT count(*) FROM bounded_rows").scalar() == 2
    finally:
        bounded.dispose()
