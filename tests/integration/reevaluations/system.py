"""A real system for campaigns: the web app and Celery workers (threads, the real broker)
on a database of the test alone, since the pump advances every running campaign it finds.

Workers come and go (`worker()`), as a restart would have them: the queues (a key prefix
of the test's own on the suite's broker) and the database outlive each of them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery
from flask.testing import FlaskClient
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.migrate import upgrade
from shared.infra.db.uow import UnitOfWork
from shared.infra.fair import FairQueue
from shared.infra.queue import ADVANCE_REEVALUATIONS, CeleryJobQueue, Job, RecordingQueue
from tests import services
from tests.conftest import new_key
from tests.helpers import wait_for
from tests.llm_server import FakeOpenAI
from tests.worker_thread import worker_thread

MODEL = "campaign-model"
SUMMARY = {"title": "Shipping", "summary": "Parts ship on Friday.", "include_in_memory": False}
DATABASE = f"{services.TEST_DATABASE}_campaigns"


@dataclass
class System:
    settings: Settings  # the test's database, the fake OpenAI server as the provider
    client: FlaskClient  # the web app; its jobs go to the test's queues
    factory: sessionmaker[Session]  # committed sessions on the test's database
    sender: Celery  # sends to the test's queues, as beat and the web do
    prefix: str
    fair: FairQueue | None = None  # the orgs' model jobs, when the web sends through it

    def new_org(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {new_key(self.factory)}"}

    def celery_app(self) -> Celery:
        from worker.app import make_celery

        app = make_celery(self.settings)
        app.conf.broker_transport_options = {
            **app.conf.broker_transport_options,
            "global_keyprefix": self.prefix,
        }
        return app

    @contextmanager
    def worker(self, *, concurrency: int = 4) -> Iterator[Celery]:
        """A worker of its own (its app, its engine), until the block ends."""
        from worker.context import context_of

        app = self.celery_app()
        try:
            with worker_thread(app, concurrency=concurrency):
                yield app
        finally:
            context_of(app).engine.dispose()

    def unit_of_work(self) -> UnitOfWork:
        """A unit of work whose jobs go to the test's queues (by the orgs' lists, if fair)."""
        return UnitOfWork(self.factory, CeleryJobQueue(self.sender, self.fair))

    def tick(self) -> None:
        """What beat sends every second."""
        CeleryJobQueue(self.sender).send(Job(ADVANCE_REEVALUATIONS))

    def campaign(self, auth: dict[str, str], campaign_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.client.get(
            f"/agents-api/reevaluations/{campaign_id}", headers=auth
        ).json  # type: ignore[assignment]
        return found

    def until_finished(self, auth: dict[str, str], campaign_id: str) -> dict[str, Any]:
        """The campaign once it has finished, beat's ticks sent meanwhile."""

        def finished() -> dict[str, Any] | None:
            self.tick()
            time.sleep(0.2)
            shown = self.campaign(auth, campaign_id)
            return shown if shown["state"] != "running" else None

        return wait_for(finished, timeout=60, what=f"re-evaluation {campaign_id} to finish")

    def summarized(self, topic_ids: list[str]) -> int:
        """How many of the topics a summary covers whole."""
        with UnitOfWork(self.factory, RecordingQueue()) as uow:
            done = uow.session.execute(
                text(
                    "SELECT count(*) FROM topics WHERE id = ANY(:ids)"
                    " AND summarized_through_id = last_message_id"
                ),
                {"ids": [uuid.UUID(t) for t in topic_ids]},
            ).scalar()
        return int(done or 0)

    def until_summarized(self, topic_ids: list[str]) -> None:
        wait_for(
            lambda: self.summarized(topic_ids) == len(topic_ids),
            timeout=60,
            what="the closed topics' summaries",
        )

    def summaries(self, topic_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        """Each topic's (summary prompt version, summary model)."""
        with UnitOfWork(self.factory, RecordingQueue()) as uow:
            rows = uow.session.execute(
                text(
                    "SELECT id, summary_prompt_version, summary_model FROM topics"
                    " WHERE id = ANY(:ids)"
                ),
                {"ids": [uuid.UUID(t) for t in topic_ids]},
            ).all()
        return {str(row[0]): (row[1], row[2]) for row in rows}


def clear_fair_lists(client: redis.Redis) -> None:
    """No model job of an earlier test waits in the orgs' lists (shared/infra/fair.py)."""
    for key in client.scan_iter(match="driftless:{fair:*"):
        client.delete(key)


@contextmanager
def campaign_system(
    settings: Settings,
    llm: FakeOpenAI,
    *,
    fair: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Iterator[System]:
    """A fresh database, the web on it, and the fake LLM answering summaries. `fair`: the
    web's model jobs wait their org's turn, as in production (shared/infra/fair.py);
    `overrides`: settings of the test's own (a quota)."""
    import worker.tasks  # noqa: F401  (registers the shared tasks before the apps finalize)
    from web.app import create_app
    from worker.app import make_celery

    admin = services.admin_database_url()
    database_url = services.recreate_database(admin, DATABASE)
    upgrade(database_url)
    llm.answer_json(SUMMARY)
    system_settings = settings.model_copy(
        update={
            "database_url": database_url,
            "llm": "openai",
            "openai_api_key": "test",
            "openai_base_url": llm.base_url,
            "llm_model": MODEL,
            "llm_max_retries": 0,
            "llm_timeout_s": 10.0,
            **(overrides or {}),
        }
    )
    engine = make_engine(database_url, pool_size=5, max_overflow=5)
    prefix = f"campaigns-{uuid.uuid4().hex[:8]}:"
    sender = make_celery(system_settings)
    sender.conf.broker_transport_options = {
        **sender.conf.broker_transport_options,
        "global_keyprefix": prefix,
    }
    data = redis.Redis.from_url(system_settings.redis_url)
    clear_fair_lists(data)
    lists = FairQueue(data) if fair else None
    app = create_app(system_settings, queue=CeleryJobQueue(sender, lists))
    try:
        yield System(
            settings=system_settings,
            client=app.test_client(),
            factory=make_session_factory(engine),
            sender=sender,
            prefix=prefix,
            fair=lists,
        )
    finally:
        clear_fair_lists(data)
        data.close()
        app.extensions["driftless"].close()
        sender.close()
        engine.dispose()
        services.drop_database(admin, DATABASE)
