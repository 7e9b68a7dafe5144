"""`UnitOfWork.one_statement`: the HTTP message post as a transaction of its own (one round
trip), and nothing of it left on the pooled connection afterwards."""

from __future__ import annotations

import uuid

import pytest
from psycopg2.extensions import TRANSACTION_STATUS_IDLE, TRANSACTION_STATUS_INTRANS
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from shared.domain.errors import NotFound
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EVALUATE_TOPIC, RecordingQueue
from shared.sessions.models import Message
from shared.sessions.posting import NewMessage, post_messages
from tests.helpers import committed_session


@pytest.fixture
def one_connection(database_url: str) -> tuple[Engine, sessionmaker[Session]]:
    """A pool of one connection, so that the next unit of work gets the same one."""
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    yield engine, make_session_factory(engine)
    engine.dispose()


def _stored(factory: sessionmaker[Session], sid: uuid.UUID) -> int:
    with factory() as db:
        count: int = db.scalar(
            select(func.count()).select_from(Message).where(Message.session_id == sid)
        )
        return count


def test_the_post_commits_as_its_statement_returns_with_no_transaction_left_open(
    one_connection: tuple[Engine, sessionmaker[Session]], committed_factory: sessionmaker[Session]
) -> None:
    _, factory = one_connection
    org_id, sid = committed_session(committed_factory)
    queue = RecordingQueue()
    with UnitOfWork(factory, queue) as uow:
        uow.one_statement()
        batch = [NewMessage("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(10)]
        posted = post_messages(uow=uow, org_id=org_id, session_id=sid, messages=batch)
        assert not uow.session.in_transaction()  # a Core connection of its own ran it
        dbapi = uow.connection().connection.dbapi_connection
        assert dbapi is not None
        # No BEGIN was sent, so nothing is open; another connection already sees the rows.
        assert dbapi.get_transaction_status() == TRANSACTION_STATUS_IDLE
        assert _stored(committed_factory, sid) == 10
        assert queue.sent == []  # the heartbeat still waits for commit(), as in a transaction
        uow.commit()
    assert posted.drift_evaluation_enqueued
    assert [job.task for job in queue.sent] == [EVALUATE_TOPIC]


def test_a_post_to_a_session_of_another_org_writes_nothing_as_one_statement(
    one_connection: tuple[Engine, sessionmaker[Session]], committed_factory: sessionmaker[Session]
) -> None:
    _, factory = one_connection
    _, sid = committed_session(committed_factory)
    other_org, _ = committed_session(committed_factory)
    with UnitOfWork(factory, RecordingQueue()) as uow, pytest.raises(NotFound):
        uow.one_statement()
        post_messages(uow=uow, org_id=other_org, session_id=sid, messages=[NewMessage("user", "x")])
    assert _stored(committed_factory, sid) == 0


def test_the_connection_goes_back_to_the_pool_with_transactions_again(
    one_connection: tuple[Engine, sessionmaker[Session]], committed_factory: sessionmaker[Session]
) -> None:
    """The next user of the same connection gets all or nothing again: its uncommitted
    write is rolled back."""
    engine, factory = one_connection
    org_id, sid = committed_session(committed_factory)
    with UnitOfWork(factory, RecordingQueue()) as uow:
        uow.one_statement()
        post_messages(uow=uow, org_id=org_id, session_id=sid, messages=[NewMessage("user", "a")])
        uow.commit()
    with UnitOfWork(factory, RecordingQueue()) as uow:
        post_messages(uow=uow, org_id=org_id, session_id=sid, messages=[NewMessage("user", "b")])
        dbapi = uow.session.connection().connection.dbapi_connection
        assert dbapi is not None and not dbapi.autocommit
        assert dbapi.get_transaction_status() == TRANSACTION_STATUS_INTRANS
        # no commit: leaving the block rolls "b" back
    assert _stored(committed_factory, sid) == 1
    assert engine.pool.checkedout() == 0


def test_a_unit_of_work_that_already_began_keeps_its_transaction(
    committed_factory: sessionmaker[Session],
) -> None:
    """Asked too late, one_statement changes nothing: what ran before stays atomic with
    the post."""
    org_id, sid = committed_session(committed_factory)
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        uow.session.execute(text("SELECT 1"))
        uow.one_statement()
        post_messages(uow=uow, org_id=org_id, session_id=sid, messages=[NewMessage("user", "x")])
        # no commit
    assert _stored(committed_factory, sid) == 0


def test_inside_an_outer_transaction_one_statement_stays_in_it(uow: UnitOfWork) -> None:
    """The tests' savepoint harness binds sessions to an open transaction: there the post
    stays in it (and is rolled back with the test)."""
    with uow:
        uow.one_statement()
        assert uow.connection() is uow.session.connection()
        dbapi = uow.connection().connection.dbapi_connection
        assert dbapi is not None and not dbapi.autocommit


@pytest.mark.parametrize("commit", [True, False])
def test_what_the_session_began_after_the_statement_is_committed_with_the_unit(
    committed_factory: sessionmaker[Session], commit: bool
) -> None:
    """The statement ran outside the ORM session; a write through the session afterwards
    is a transaction of its own, kept by `commit()` and by nothing else."""
    org_id, sid = committed_session(committed_factory)
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        uow.one_statement()
        post_messages(uow=uow, org_id=org_id, session_id=sid, messages=[NewMessage("user", "a")])
        uow.session.execute(
            text("UPDATE topics SET title = 'renamed' WHERE session_id = :sid"), {"sid": sid}
        )
        if commit:
            uow.commit()
    with committed_factory() as db:
        title = db.scalar(text("SELECT title FROM topics WHERE session_id = :sid"), {"sid": sid})
    assert (title == "renamed") is commit
    assert _stored(committed_factory, sid) == 1  # the statement committed on its own
