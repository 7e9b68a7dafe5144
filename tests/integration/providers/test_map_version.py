"""[4.2] Each process re-reads the org-to-model map only when its version moved: a check
every refresh is one one-row query, so a fleet's checks cost O(processes), not
O(processes x orgs); a PUT, a DELETE or an org's deletion still shows at the next check,
and the last map is kept while PostgreSQL cannot be read."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, delete, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.infra.db.uow import UnitOfWork
from shared.providers.per_org import REFRESH_S, OrgClients
from shared.providers.service import delete_provider, set_provider
from tests.integration.providers.orgs import BOX, new_org, new_uow

# The map's query, not the version's (org_providers_version): \b stops at the "_".
MAP_READ = re.compile(r"\bFROM org_providers\b")
VERSION_READ = re.compile(r"\bFROM org_providers_version\b")


class Reads:
    """The statements a connection ran that read the map, and those that read its version."""

    def __init__(self) -> None:
        self.map = 0
        self.version = 0

    def saw(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.map += bool(MAP_READ.search(statement)) and statement.lstrip().startswith("SELECT")
        self.version += bool(VERSION_READ.search(statement))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def next_check(self) -> None:
        self.now += REFRESH_S + 0.1


@pytest.fixture
def reads(connection: Connection) -> Iterator[Reads]:
    counted = Reads()
    event.listen(connection, "before_cursor_execute", counted.saw)
    yield counted
    event.remove(connection, "before_cursor_execute", counted.saw)


def _clients(factory: sessionmaker[Session], clock: Clock) -> OrgClients[str]:
    """As the routers build them (REFRESH_S), each client being the org's model's name."""
    return OrgClients(
        new_uow=lambda: new_uow(factory), box=BOX, build=lambda config: config.model,
        failure=RuntimeError, clock=clock,
    )  # fmt: skip


def _set_model(factory: sessionmaker[Session], org_id: uuid.UUID, model: str) -> None:
    """A PUT /agents-api/provider with the fleet's base URL, committed."""
    with new_uow(factory) as uow:
        set_provider(
            uow=uow, org_id=org_id, base_url=None, api_key="sk-own", model=model, box=BOX,
            allow_private=False,
        )  # fmt: skip
        uow.commit()


def test_the_map_is_read_again_only_after_its_version_moved_42(
    session_factory: sessionmaker[Session], reads: Reads
) -> None:
    first = new_org(session_factory, server=None)
    second = new_org(session_factory, server=None)
    _set_model(session_factory, first, "first-model")
    clock = Clock()
    clients = _clients(session_factory, clock)

    assert clients.own(first) == "first-model"
    assert reads.map == 1
    for _ in range(3):  # nothing written: each check reads the version, never the map
        clock.next_check()
        assert clients.own(first) == "first-model" and clients.own(second) is None
    assert (reads.map, reads.version) == (1, 4)

    _set_model(session_factory, second, "second-model")  # another org's PUT
    clock.next_check()
    assert clients.own(second) == "second-model"
    assert reads.map == 2
    clock.next_check()
    assert clients.own(second) == "second-model"
    assert reads.map == 2

    with new_uow(session_factory) as uow:  # a DELETE
        delete_provider(uow=uow, org_id=first)
        uow.commit()
    clock.next_check()
    assert clients.own(first) is None
    assert reads.map == 3

    with new_uow(session_factory) as uow:  # the org deleted: its model goes by cascade
        uow.session.execute(delete(Org).where(Org.id == second))
        uow.commit()
    clock.next_check()
    assert clients.own(second) is None
    assert reads.map == 4


def test_the_last_map_is_kept_while_postgresql_cannot_be_read_42(
    session_factory: sessionmaker[Session],
) -> None:
    org_id = new_org(session_factory, server=None)
    _set_model(session_factory, org_id, "org-model")
    down = False

    def flaky_uow() -> UnitOfWork:
        if down:
            raise OperationalError("SELECT 1", {}, Exception("connection refused"))
        return new_uow(session_factory)

    clock = Clock()
    clients: OrgClients[str] = OrgClients(
        new_uow=flaky_uow, box=BOX, build=lambda config: config.model, failure=RuntimeError,
        clock=clock,
    )  # fmt: skip
    assert clients.own(org_id) == "org-model"

    down = True
    clock.next_check()
    assert clients.own(org_id) == "org-model"

    # Another org's PUT while this process was cut off (a new org: the tests' transaction
    # would give the same org's row the same updated_at, which reuses its built client).
    other = new_org(session_factory, server=None)
    _set_model(session_factory, other, "other-model")
    down = False
    clock.next_check()
    assert clients.own(other) == "other-model"
