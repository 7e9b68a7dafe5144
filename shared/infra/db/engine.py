"""Engine and session factory from a database URL."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy
from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

# Waiting longer than this for a pooled connection is an error naming the pool, not a
# request or task that hangs: the pool is too small for the process's concurrency.
POOL_TIMEOUT_S = 10.0
# Connections are replaced after this long, so a PgBouncer or PostgreSQL failover or
# rebalance is picked up gradually; dead ones are caught sooner by the idle ping below.
POOL_RECYCLE_S = 1800
# A connection handed back to the pool less than this long ago is taken as alive: it
# just answered. One idle for longer is pinged (SELECT 1) before it is handed out.
PING_IDLE_S = 1.0
# Marks a connection whose transaction began but has not sent its bounds yet
# (bound_transactions).
UNBOUNDED = "driftless_unbounded"


def sqlalchemy_url(database_url: str) -> str:
    """Pin the driver: `postgres://` and `postgresql://` both mean psycopg2 here."""
    for prefix in ("postgres://", "postgresql://"):
        if database_url.startswith(prefix):
            return "postgresql+psycopg2://" + database_url[len(prefix) :]
    return database_url


def make_engine(
    database_url: str,
    *,
    pool_size: int = 5,
    max_overflow: int = 5,
    pool_timeout: float = POOL_TIMEOUT_S,
) -> Engine:
    """An engine holding at most pool_size + max_overflow connections to the database.

    Connections open on demand: a process never holds more than it ever used at once.
    """
    # Safe behind PgBouncer in transaction mode: psycopg2 binds parameters client-side
    # (no server-side prepared statements) and the code uses no session state.
    # Through the module, not a name imported before traces were on: the instrumentation
    # traces the engines its wrapper of `sqlalchemy.create_engine` makes
    # (shared/infra/tracing.py).
    engine = sqlalchemy.create_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=pool_timeout,
        pool_recycle=POOL_RECYCLE_S,
        future=True,
    )
    ping_idle_connections(engine)
    transactions_again_on_checkin(engine)
    return engine


def ping_idle_connections(engine: Engine) -> None:
    """Ping a pooled connection before use only when it sat idle (SQLAlchemy's
    "pessimistic" disconnect handling, with a custom checkout event).

    A web or worker process outlives PostgreSQL restarts and failovers, so a connection
    that waited in the pool may be dead. `pool_pre_ping` pings on every checkout: a
    round trip on every request, most of it for a connection that answered a
    millisecond ago. A connection that dies while in steady use fails its request (503),
    and SQLAlchemy then replaces every connection of the pool older than the failure.
    """

    @event.listens_for(engine, "checkin")
    def _stamp(dbapi_connection: Any, entry: ConnectionPoolEntry) -> None:
        entry.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, entry: ConnectionPoolEntry, _proxy: Any) -> None:
        idle_since = entry.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < PING_IDLE_S:
            return  # just opened, or just answered
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            # The pool throws this connection away and checks out another (or a new one).
            raise DisconnectionError(f"a pooled connection was dead: {exc}") from exc


def transactions_again_on_checkin(engine: Engine) -> None:
    """A connection that `UnitOfWork.one_statement` switched to autocommit goes back to
    the pool with transactions again: the switch was for that unit of work only.

    psycopg2's attribute is local (no round trip); a connection closed meanwhile is
    thrown away by the pool anyway.
    """

    @event.listens_for(engine, "checkin")
    def _transactions_again(dbapi_connection: Any, _entry: ConnectionPoolEntry) -> None:
        if dbapi_connection is not None and not dbapi_connection.closed:
            dbapi_connection.autocommit = False


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: services return ORM objects that views serialize after commit.
    return sessionmaker(bind=engine, expire_on_commit=False)


def bound_transactions(
    engine: Engine,
    *,
    lock_timeout_s: float | None,
    statement_timeout_s: float | None,
    idle_in_transaction_s: float | None = None,
) -> None:
    """Every transaction of `engine` gives up on a row lock or a statement after these
    (on a lock only after the statement timeout when `lock_timeout_s` is None: the web),
    and is ended by PostgreSQL when it sits idle for `idle_in_transaction_s` (the web's
    backstop: no request should hold a transaction while it waits on anything else).

    Set per transaction (SET LOCAL), not per connection: a PgBouncer in transaction mode
    hands the server connection to someone else after each transaction, and refuses the
    startup `options` that would set them for good. A timeout is an OperationalError,
    which the tasks retry and the web answers 503 `timeout`; an idle transaction ended
    so takes its connection with it (the pool replaces it).

    The SET LOCALs travel in front of the transaction's first statement, in the same
    query string, not as a statement of their own: a round trip less per transaction
    (a summary has two), and 4 % of a gevent worker's CPU (py-spy). PostgreSQL runs the
    string's statements in order and answers with the last one's result.
    """
    settings = {
        "lock_timeout": lock_timeout_s,
        "statement_timeout": statement_timeout_s,
        "idle_in_transaction_session_timeout": idle_in_transaction_s,
    }
    bounds = "; ".join(
        f"SET LOCAL {name} = '{int(seconds * 1000)}ms'"
        for name, seconds in settings.items()
        if seconds is not None
    )
    if not bounds:
        return

    @event.listens_for(engine, "begin")
    def _bound(connection: Connection) -> None:
        connection.info[UNBOUNDED] = True

    @event.listens_for(engine, "before_cursor_execute", retval=True)
    def _bound_first_statement(
        connection: Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        _context: Any,
        executemany: bool,
    ) -> tuple[str, Any]:
        if not connection.info.pop(UNBOUNDED, False):
            return statement, parameters
        if executemany:
            # The driver repeats an executemany's string once per row: not for SET.
            cursor.execute(bounds)
            return statement, parameters
        return f"{bounds}; {statement}", parameters
