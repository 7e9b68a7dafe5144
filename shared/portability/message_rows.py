"""Writing a batch of messages in order, with new ids of the service's one sequence: the
rows of an export's session (COPY) or of a chat history (INSERT). The ids are taken from
the sequence first, in order, and then written: an INSERT … RETURNING does not promise to
answer in the order it was fed.

The search vectors are generated columns: PostgreSQL fills them on insert, COPY included.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import psycopg2.extensions
from sqlalchemy.exc import DBAPIError

from shared.infra.db.uow import UnitOfWork


def insert_messages(
    *,
    uow: UnitOfWork,
    session_id: uuid.UUID,
    topic_ids: list[str],
    rows: Iterable[tuple[str, str, str | None, str | None, str | None, datetime | None]],
) -> list[int]:
    """Insert a batch of (role, content, name, tool name, tool call id, time) in order,
    two statements whatever its size; the new ids, in order.

    The ids are taken from the sequence first (in order, by generate_series) and then
    written: an INSERT … RETURNING does not promise to answer in the order it was fed.
    """
    roles, contents, names, tool_names, tool_call_ids, created = (
        list(c) for c in zip(*rows, strict=True)
    )
    connection = uow.session.connection()
    ids = _next_ids(uow, len(roles))
    parameters: dict[str, Any] = {
        "ids": ids,
        "session": str(session_id),
        "topics": topic_ids,
        "roles": roles,
        "contents": contents,
        "names": names,
        "tool_names": tool_names,
        "tool_call_ids": tool_call_ids,
        "created": created,
    }
    connection.exec_driver_sql(_INSERT_MESSAGES, parameters)
    return ids


def copy_messages(
    *,
    uow: UnitOfWork,
    session_id: uuid.UUID,
    rows: Sequence[tuple[str, str, str, str | None, str | None, str | None, datetime]],
) -> list[int]:
    """Write a batch of (topic id, role, content, name, tool name, tool call id, time) in order
    with one COPY; the new ids, in order.

    COPY costs PostgreSQL a fifth less than INSERT … SELECT FROM unnest (no arrays of
    literals to parse and unpack); the rows get the same generated search vector, index
    entries, foreign-key checks and WAL as any insert. The ids are taken first, as above.
    psycopg2 has no COPY on a green connection (the gevent web's: "copy_expert cannot be
    used with an asynchronous callback"), so there the batch is inserted instead.
    """
    if psycopg2.extensions.get_wait_callback() is not None:
        return insert_messages(
            uow=uow, session_id=session_id, topic_ids=[row[0] for row in rows],
            rows=[row[1:] for row in rows],
        )  # fmt: skip
    ids = _next_ids(uow, len(rows))
    session = str(session_id)
    data = "".join(
        f"{id_}\t{session}\t{topic}\t{role}\t{_copy_field(content)}\t{_copy_field(name)}"
        f"\t{_copy_field(tool_name)}\t{_copy_field(tool_call_id)}\t{created.isoformat()}\n"
        for id_, (topic, role, content, name, tool_name, tool_call_id, created) in zip(
            ids, rows, strict=True
        )
    )
    # psycopg2's own cursor: COPY has no SQLAlchemy statement. Same connection, same
    # transaction as the rest of the session's rows.
    connection = uow.session.connection()
    dbapi: Any = connection.connection
    refusal: type[Exception] = connection.dialect.loaded_dbapi.Error
    try:
        with dbapi.cursor() as cursor:
            cursor.copy_expert(_COPY_MESSAGES, io.StringIO(data))
    except refusal as error:  # as SQLAlchemy raises an INSERT's, for the importer to name
        raise DBAPIError.instance(_COPY_MESSAGES, None, error, refusal) from None
    return ids


def _copy_field(value: str | None) -> str:
    """`value` in COPY's text format: NULL as \\N; backslash, tab and line ends escaped."""
    if value is None:
        return "\\N"
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_COPY_ESCAPES)
    return value


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_COPY_MESSAGES = (
    "COPY messages (id, session_id, topic_id, role, content, name, tool_name, tool_call_id,"
    " created_at) FROM STDIN"
)


def _next_ids(uow: UnitOfWork, n: int) -> list[int]:
    """`n` new message ids, increasing: one round trip, on psycopg2's own cursor (a
    SQLAlchemy result costs more than the statement for thousands of one-column rows)."""
    dbapi: Any = uow.session.connection().connection
    with dbapi.cursor() as cursor:
        cursor.execute(_NEXT_IDS, {"n": n})
        return sorted(row[0] for row in cursor.fetchall())


# The sequence's name looked up once (a subquery), not once a row: a third of the time.
_NEXT_IDS = (
    "SELECT nextval((SELECT pg_get_serial_sequence('messages', 'id')::regclass))"
    " FROM generate_series(1, %(n)s)"
)
# A NULL time (a chat history's messages) is the insert's own clock, as a post's is.
_INSERT_MESSAGES = (
    "INSERT INTO messages (id, session_id, topic_id, role, content, name, tool_name,"
    " tool_call_id, created_at) SELECT u.id, %(session)s::uuid, u.topic, u.role, u.content,"
    " u.name, u.tool_name, u.tool_call_id, coalesce(u.created, clock_timestamp())"
    " FROM unnest(%(ids)s::bigint[], %(topics)s::uuid[], %(roles)s::text[],"
    " %(contents)s::text[], %(names)s::text[], %(tool_names)s::text[],"
    " %(tool_call_ids)s::text[], %(created)s::timestamptz[])"
    " AS u(id, topic, role, content, name, tool_name, tool_call_id, created)"
)
