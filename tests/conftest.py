"""Fixtures on real PostgreSQL and Redis: a migrated test database, a savepoint per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import create_api_key, org_for_key
from shared.infra.config import Settings
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.migrate import upgrade
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.openai_provider import OpenAIProvider
from tests import services
from tests.llm_server import FakeOpenAI


@pytest.fixture(scope="session")
def database_url() -> str:
    url = services.recreate_database(services.admin_database_url(), services.TEST_DATABASE)
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = f"{services.redis_base_url()}/{services.DATA_REDIS_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the tests' data database, closed after the test."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def broker_url() -> str:
    url = f"{services.redis_base_url()}/{services.BROKER_REDIS_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture(scope="session")
def settings(database_url: str, redis_url: str, broker_url: str) -> Settings:
    # A short reconcile grace keeps the lost-job test quick; production keeps 60 s.
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        broker_url=broker_url,
        llm="local",
        reconcile_s=1,
        secret_keys=services.SEALING_KEY,
    )


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url, pool_size=10, max_overflow=20)
    yield engine
    engine.dispose()


# --- a savepoint per test -----------------------------------------------------------


@pytest.fixture
def connection(engine: Engine) -> Iterator[Connection]:
    """One connection in an outer transaction that is rolled back after the test."""
    with engine.connect() as connection:
        outer = connection.begin()
        yield connection
        outer.rollback()


@pytest.fixture
def session_factory(connection: Connection) -> sessionmaker[Session]:
    # Each unit of work's commit releases a savepoint inside the test's transaction.
    return sessionmaker(
        bind=connection, expire_on_commit=False, join_transaction_mode="create_savepoint"
    )


@pytest.fixture
def queue() -> RecordingQueue:
    return RecordingQueue()


@pytest.fixture
def uow(session_factory: sessionmaker[Session], queue: RecordingQueue) -> UnitOfWork:
    return UnitOfWork(session_factory, queue)


@pytest.fixture
def app(settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue) -> Any:
    from web.app import create_app

    return create_app(settings, queue=queue, session_factory=session_factory)


@pytest.fixture
def client(app: Any) -> FlaskClient:
    client: FlaskClient = app.test_client()
    return client


def new_key(factory: sessionmaker[Session]) -> str:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        key = create_api_key(uow=uow, org_name=f"org-{uuid.uuid4().hex[:12]}")
        uow.commit()
    return key


@pytest.fixture
def api_key(session_factory: sessionmaker[Session]) -> str:
    return new_key(session_factory)


@pytest.fixture
def auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


@pytest.fixture
def org(session_factory: sessionmaker[Session], api_key: str) -> str:
    """The id of `auth`'s org, as a model job carries it (shared/infra/fair.py)."""
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        return str(org_for_key(uow=uow, key=api_key))


@pytest.fixture
def other_auth(session_factory: sessionmaker[Session]) -> dict[str, str]:
    """A key of a second org, for isolation tests."""
    return {"Authorization": f"Bearer {new_key(session_factory)}"}


# --- committed data (concurrency, real workers) ---------------------------------------


@pytest.fixture
def committed_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that really commit: for tests that need several connections at once."""
    return make_session_factory(engine)


# --- the LLM stand-in: our OpenAI-compatible server, through the real openai client ---


@pytest.fixture(scope="session")
def fake_openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake_openai(fake_openai_server: FakeOpenAI) -> FakeOpenAI:
    """The server, with no calls recorded and no script yet."""
    fake_openai_server.reset()
    return fake_openai_server


@pytest.fixture
def openai_llm(fake_openai: FakeOpenAI) -> Iterator[OpenAIProvider]:
    """The real provider pointed at the fake server, with short timeouts."""
    provider = OpenAIProvider(
        api_key="test", base_url=fake_openai.base_url, model="test-model", timeout_s=0.5,
        max_retries=1,
    )  # fmt: skip
    yield provider
    provider.close()
