"""The vector tests' system: a database on the embedded PostgreSQL with pgvector
(tests/vectors.py), the web app on it, the fake model server's embeddings, and a real
Celery worker when a test asks for one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from celery import Celery
from flask.testing import FlaskClient
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.embeddings.batch import Embedded, embed_batch
from shared.embeddings.provider import Embedder, make_embedder
from shared.embeddings.sweep import Planned, sweep
from shared.infra.config import Settings
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EMBED_NEW, CeleryJobQueue, Job, RecordingQueue
from shared.providers.service import set_provider
from tests.conftest import new_key
from tests.helpers import new_session, post_message
from tests.integration.providers.orgs import BOX
from tests.llm_server import FakeOpenAI
from tests.vectors import pgvector_admin_url, vector_database_url  # noqa: F401
from tests.worker_thread import worker_thread


@dataclass
class VectorSystem:
    settings: Settings  # embeddings on, a model of the test's own (fresh cursors)
    client: FlaskClient  # posts go nowhere but PostgreSQL (a recording queue)
    factory: sessionmaker[Session]  # committed sessions on the pgvector database
    embedder: Embedder
    redis: redis.Redis
    prefix: str

    def new_org(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {new_key(self.factory)}"}

    def new_org_with_server(self, server: FakeOpenAI) -> tuple[dict[str, str], uuid.UUID]:
        """An org that set its own model on `server` (its embeddings come from there)."""
        auth = self.new_org()
        with self.unit_of_work() as uow:
            org_id = org_for_key(uow=uow, key=auth["Authorization"].removeprefix("Bearer "))
            assert org_id is not None
            set_provider(
                uow=uow, org_id=org_id, base_url=server.base_url, api_key="sk-own",
                model="org-chat", box=BOX, allow_private=True,
            )  # fmt: skip
            uow.commit()
        return auth, org_id

    def session_of(self, auth: dict[str, str], *texts: str) -> str:
        """A new session of ada's with these user messages; its id."""
        session = new_session(self.client, auth, user="ada")
        for content in texts:
            post_message(self.client, auth, session["id"], content)
        return str(session["id"])

    def unit_of_work(self) -> UnitOfWork:
        return UnitOfWork(self.factory, RecordingQueue())

    def rows(self, query: str, **params: Any) -> list[Any]:
        with self.unit_of_work() as uow:
            return list(uow.session.execute(text(query), params).all())

    def celery_app(self) -> Celery:
        from worker.app import make_celery

        app = make_celery(self.settings)
        app.conf.broker_transport_options = {
            **app.conf.broker_transport_options,
            "global_keyprefix": self.prefix,
        }
        return app

    @contextmanager
    def worker(self) -> Iterator[Celery]:
        from worker.context import context_of

        app = self.celery_app()
        try:
            with worker_thread(app):
                yield app
        finally:
            context_of(app).engine.dispose()

    def plan(self, embedder: Embedder | None = None) -> tuple[Planned, list[Job]]:
        """Beat's tick (nothing left to settle): what it planned, and the jobs it sent."""
        queue = RecordingQueue()
        planned = sweep(
            new_uow=lambda: UnitOfWork(self.factory, queue),
            model=(embedder or self.embedder).model, redis_client=self.redis, settle_s=0,
        )  # fmt: skip
        return planned, queue.sent

    def run(self, job: Job, embedder: Embedder | None = None) -> Embedded:
        """One of the planner's jobs, here, as a worker runs it."""
        assert job.task == EMBED_NEW
        return embed_batch(
            new_uow=self.unit_of_work, embedder=embedder or self.embedder,
            message_ids=job.kwargs.get("message_ids", []),
            topic_ids=[uuid.UUID(t) for t in job.kwargs.get("topic_ids", [])],
            redis_client=self.redis, per_org=self.settings.embeddings_per_org,
        )  # fmt: skip

    def sweep(self, embedder: Embedder | None = None) -> Embedded:
        """A tick and then its jobs, one after another: their vectors, summed."""
        _, jobs = self.plan(embedder)
        done = [self.run(job, embedder) for job in jobs]
        return Embedded(*(sum(getattr(d, f) for d in done) for f in _COUNTS))

    def send(self, app: Celery, job: Job) -> None:
        """As beat (or the CLI) sends it, to the test's queues."""
        CeleryJobQueue(app).send(job)


_COUNTS = ("messages", "topics", "failed_messages", "failed_topics")


@pytest.fixture
def vectors(
    settings: Settings,
    vector_database_url: str,  # noqa: F811
    fake_openai: FakeOpenAI,
) -> Iterator[VectorSystem]:
    import worker.tasks  # noqa: F401  (registers the shared tasks before the apps finalize)
    from web.app import create_app

    system_settings = settings.model_copy(
        update={
            "database_url": vector_database_url,
            "embeddings": "openai",
            "embeddings_base_url": fake_openai.base_url,
            "embeddings_api_key": "test",
            "embeddings_model": f"emb-{uuid.uuid4().hex[:8]}",
            "llm_max_retries": 0,
        }
    )
    engine = make_engine(vector_database_url, pool_size=5, max_overflow=5)
    app = create_app(system_settings, queue=RecordingQueue())
    embedder = make_embedder(system_settings)
    assert embedder is not None
    client = redis.Redis.from_url(system_settings.redis_url)
    try:
        yield VectorSystem(
            settings=system_settings, client=app.test_client(),
            factory=make_session_factory(engine), embedder=embedder, redis=client,
            prefix=f"vectors-{uuid.uuid4().hex[:8]}:",
        )  # fmt: skip
    finally:
        client.close()
        app.extensions["driftless"].close()
        engine.dispose()
