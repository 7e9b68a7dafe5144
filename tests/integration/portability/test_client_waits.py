"""[4.1] Imports and exports never hold the database while they wait on their client:
an import reads a session's lines with no transaction open and writes them in one short
one; imports are capped per org, as exports are; an export's slot is renewed on a timer
while it is open (not only when a line is written) and given back when it ends."""

from __future__ import annotations

import io
import time
import uuid
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from shared.domain.errors import TooLarge
from shared.domain.limits import Limits
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.leases import OrgLeases, leases_key
from shared.infra.queue import RecordingQueue
from shared.portability import admission
from shared.portability import format as fmt
from shared.portability.export import ExportScope, open_export
from shared.portability.importing import import_stream
from tests.integration.portability.export_file import at, body, export_lines

NDJSON = {"Content-Type": "application/x-ndjson"}


class _Watched:
    """An import body that notes, at each read, how many units of work the import holds
    open: what a client that stops sending would keep waiting."""

    def __init__(self, data: bytes) -> None:
        self._raw = io.BytesIO(data)
        self.open = 0
        self.opened = 0  # units of work, in all
        self.open_at_reads: list[int] = []

    def readline(self, size: int = -1, /) -> bytes:
        self.open_at_reads.append(self.open)
        return self._raw.readline(size)

    def new_uow(self, factory: sessionmaker[Session]) -> Any:
        watched = self

        class Counted(UnitOfWork):
            def __enter__(self) -> UnitOfWork:
                watched.open += 1
                watched.opened += 1
                return super().__enter__()

            def __exit__(self, *exc: object) -> None:
                watched.open -= 1
                super().__exit__(*exc)  # type: ignore[arg-type]

        return lambda: Counted(factory, RecordingQueue())


def test_an_import_reads_its_client_with_no_transaction_open_41(
    session_factory: sessionmaker[Session], org: str
) -> None:
    stream = _Watched(body(export_lines(sessions=3, messages=6)))
    imported = import_stream(
        new_uow=stream.new_uow(session_factory), org_id=uuid.UUID(org), stream=stream,
        limits=Limits(),
    )  # fmt: skip
    assert imported.as_dict()["sessions"] == 3 and imported.as_dict()["facts"] == 2
    assert len(stream.open_at_reads) > 20
    assert set(stream.open_at_reads) == {0}  # every line was read with nothing open


def test_a_session_past_the_byte_bound_is_413_naming_it_and_writes_nothing_41(
    session_factory: sessionmaker[Session], org: str
) -> None:
    lines = export_lines(sessions=2, messages=4)
    big = next(n for n, line in enumerate(lines) if '"content":"message 0:' in line)
    lines[big] = lines[big].replace('"content":"message 0:', '"content":"' + "x" * 60_000)
    stream = _Watched(body(lines))
    with pytest.raises(TooLarge) as refused:
        import_stream(
            new_uow=stream.new_uow(session_factory), org_id=uuid.UUID(org), stream=stream,
            limits=Limits(import_session_bytes=50_000),
        )  # fmt: skip
    session = next(n for n, line in enumerate(lines) if '"type":"session"' in line)
    assert refused.value.message.startswith(
        f"line {big + 1}: the session of line {session + 1} holds more than 50000 bytes"
    )
    assert "nothing was imported" in refused.value.message


def test_an_org_past_its_imports_at_once_is_told_to_retry_and_writes_nothing_41(
    client: FlaskClient, auth: dict[str, str], org: str, redis_url: str
) -> None:
    leases = OrgLeases(redis.Redis.from_url(redis_url), kind=admission.IMPORTS, lease_s=60)
    held = [
        leases.acquire(org_id=uuid.UUID(org), limit=99) for _ in range(Limits().imports_per_org)
    ]
    data = body(export_lines(sessions=1, messages=2))
    try:
        response = client.post("/agents-api/import", data=data, headers={**auth, **NDJSON})
        assert response.status_code == 429, response.json
        assert response.json["error"]["code"] == "too_busy"  # type: ignore[index]
        assert int(response.headers["Retry-After"]) > 0
        sessions: Any = client.get(
            "/agents-api/sessions?agentId=planner&userId=ada", headers=auth
        ).json
        assert sessions["sessions"] == []
    finally:
        for lease in held:
            leases.release(org_id=uuid.UUID(org), lease_id=lease)  # type: ignore[arg-type]
    # A finished import gives its slot back: the next ones are admitted.
    for _ in range(Limits().imports_per_org + 1):
        answer = client.post("/agents-api/import", data=data, headers={**auth, **NDJSON})
        assert answer.status_code == 200, answer.json


def test_an_open_export_keeps_its_slot_while_no_line_moves_and_frees_it_at_close_41(
    session_factory: sessionmaker[Session],
    org: str,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The probe's stalled reader: the lease was renewed only when a line was written, so
    # it lapsed under an export still holding its snapshot, and the org got past its cap.
    monkeypatch.setattr(admission, "LEASE_S", 1.5)  # renewed every 0.5 s
    client = redis.Redis.from_url(redis_url)
    lines = open_export(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()),
        redis_client=client,
        scope=ExportScope(org_id=uuid.UUID(org)),
    )
    records = lines.records()
    assert next(records)[0] == "header"  # the export is open; its reader stops
    time.sleep(4.0)  # over two leases' worth
    key = leases_key(admission.KIND, uuid.UUID(org))
    assert client.zcard(key) == 1  # still counted: the slot was renewed meanwhile
    lines.close()
    assert client.zcard(key) == 0


def assert_idle_transactions_end(settings: Settings) -> None:
    """The web's transactions, left idle past DRIFTLESS_WEB_IDLE_IN_TRANSACTION_MS, are
    ended by PostgreSQL, and the pool goes on with a new connection."""
    from web.app import create_app

    app = create_app(settings.model_copy(update={"web_idle_in_transaction_ms": 400}))
    runtime = app.extensions["driftless"]
    try:
        with runtime.unit_of_work() as uow:
            shown = uow.session.scalar(text("SHOW idle_in_transaction_session_timeout"))
            assert shown == "400ms"
            time.sleep(1.5)  # what a request waiting on its client would do
            with pytest.raises(OperationalError):
                uow.session.scalar(text("SELECT 1"))
        with runtime.unit_of_work() as uow:
            assert uow.session.scalar(text("SELECT 1")) == 1
    finally:
        runtime.engine.dispose()


def test_the_webs_idle_transactions_are_ended_by_postgresql_41(settings: Settings) -> None:
    assert_idle_transactions_end(settings)


def test_facts_past_the_byte_bound_are_written_in_parts_and_again_change_nothing_41(
    session_factory: sessionmaker[Session], org: str
) -> None:
    header = export_lines(sessions=0)[0]
    facts = [
        fmt.dump_line(fmt.Fact(
            agent_id="planner", user_id="ada", key="notes", value=f"{n} " + "v" * 2_000,
            valid_from=at(n), valid_to=at(n + 1) if n < 599 else None, changed_by="user",
        ))
        for n in range(600)
    ]  # fmt: skip  # a key's history of about 1.3 MB: two parts of 1 MiB at most
    data = body([header, *facts])
    limits = Limits(import_session_bytes=1024 * 1024)
    for expected in (600, 0):  # again: every version is there, none written twice
        stream = _Watched(data)
        imported = import_stream(
            new_uow=stream.new_uow(session_factory), org_id=uuid.UUID(org), stream=stream,
            limits=limits,
        )  # fmt: skip
        assert imported.as_dict()["facts"] == expected
        assert stream.opened == 2  # two short transactions
        assert set(stream.open_at_reads) == {0}
