"""Unit of work: one transaction, and the jobs it wants sent once that transaction commits."""

from __future__ import annotations

import logging
from types import TracebackType

import redis
from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.domain.limits import Limits
from shared.infra.queue import Job, JobQueue

log = logging.getLogger(__name__)


class UnitOfWork:
    """Rolls back unless `commit()` is called; sends recorded jobs only after a commit.

    Jobs are sent after the commit (never inside the transaction) so that a worker can
    never pick up a job whose rows it cannot see yet, and a rolled-back request sends
    nothing. A send that fails after the commit is logged, not raised: the data is
    durable and the reconciler (beat) re-enqueues work whose job was lost.
    """

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        queue: JobQueue,
        limits: Limits | None = None,
        redis_client: redis.Redis | None = None,
    ) -> None:
        self._session_factory = session_factory
        self._queue = queue
        # The process's configured limits, for the services that check what they store.
        self.limits = limits or Limits()
        # Where the services that admit work per org (searches) keep its leases; None:
        # they admit everything (a unit of work built by hand, in a test or a script).
        self.redis = redis_client
        self._pending: list[Job] = []
        self.sent: list[Job] = []

    def __enter__(self) -> UnitOfWork:
        self.session = self._session_factory()
        self._statement: Connection | None = None
        self._pending = []
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # close() rolls back whatever was not committed and detaches the loaded objects
        # without expiring them, so views can serialize what a service returned.
        if self._statement is not None:
            self._statement.close()
        self.session.close()

    def one_statement(self) -> None:
        """Declare this unit of work one statement, atomic by itself: PostgreSQL then runs it
        as its own transaction (autocommit), one round trip instead of three (BEGIN, the
        statement, COMMIT). `commit()` still sends the jobs, after the statement committed.

        Only for a caller whose single write is that statement, run on `connection()`, and
        that answers nothing it could fail to build afterwards: the message post without
        `?context=true`. The statement runs on a Core connection of its own, without the
        ORM session's bookkeeping (a third of the post's database CPU in the web); the
        session, if used at all, keeps its own transaction. Called before the first
        statement; where the session already began a transaction, or is bound to one (the
        tests' savepoints), it changes nothing and `connection()` is the session's.
        """
        bind = self.session.get_bind()
        if self.session.in_transaction() or not isinstance(bind, Engine):
            return
        self._statement = bind.connect()
        # psycopg2's own switch, not SQLAlchemy's isolation_level="AUTOCOMMIT": switching
        # back from that costs a round trip of its own (SET default_transaction_isolation)
        # when the connection returns to the pool. This one is switched back for free on
        # the way back (shared/infra/db/engine.py). SQLAlchemy's BEGIN and COMMIT become no-ops.
        self._statement.connection.dbapi_connection.autocommit = True  # type: ignore[union-attr]

    def connection(self) -> Connection:
        """Where this unit's Core statements run: the one-statement connection when one
        was declared, else the session's, in its transaction."""
        if self._statement is not None:
            return self._statement
        return self.session.connection()

    def enqueue(self, job: Job) -> None:
        """Record a job to send after a successful commit."""
        self._pending.append(job)

    def commit(self) -> None:
        # After one statement the session usually never began (committing it anyway
        # costs a third of the post's database CPU in the web); anything it did begin,
        # an ORM object added say, is committed.
        if self._statement is None or self.session.in_transaction():
            self.session.commit()
        pending, self._pending = self._pending, []
        for job in pending:
            try:
                self._queue.send(job)
                self.sent.append(job)
            except Exception:
                log.exception("could not send %s after commit; the reconciler will retry", job)
