"""A real Celery worker (in a thread, on the real broker) calling our OpenAI-compatible
server: the summary's call is a usage row of the topic's org and moves the org's
counters, answered or failed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import CeleryJobQueue
from tests.conftest import new_key
from tests.helpers import new_session, post_message, wait_for
from tests.integration.usage.ledger import Row, rows_of
from tests.llm_server import FakeOpenAI, Reply
from tests.worker_thread import worker_thread

MODEL = "usage-probe-model"
SUMMARY = {"title": "Billing", "summary": "PostgreSQL, Friday.", "include_in_memory": True}


@dataclass(frozen=True)
class System:
    client: FlaskClient  # the web app, sending jobs to the worker below
    factory: sessionmaker[Session]  # committed sessions on the same database

    def new_org(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {new_key(self.factory)}"}

    def close_a_topic(self, auth: dict[str, str]) -> tuple[str, str]:
        """(org id, topic id) of a six-message topic just closed: its summary is queued."""
        session = new_session(self.client, auth)
        for i in range(6):
            role = "user" if i % 2 == 0 else "assistant"
            post_message(self.client, auth, session["id"], f"We decided on step {i}.", role)
        response = self.client.post(f"/agents-api/sessions/{session['id']}/topics", headers=auth)
        assert response.status_code == 201, response.json
        return session["orgId"], session["activeTopicId"]

    def summarized(self, auth: dict[str, str], topic_id: str) -> Any:
        def probe() -> Any:
            topic: Any = self.client.get(f"/agents-api/topics/{topic_id}", headers=auth).json
            return topic if topic["summarizedAt"] else None

        return wait_for(probe, timeout=60, what="the worker to summarize the closed topic")

    def rows(self, org_id: str) -> list[Row]:
        return rows_of(self.factory, uuid.UUID(org_id))


@pytest.fixture(scope="module")
def system(settings: Settings, fake_openai_server: FakeOpenAI) -> Iterator[System]:
    import worker.tasks  # noqa: F401  (registers the shared tasks before the app finalizes)
    from web.app import create_app
    from worker.app import make_celery
    from worker.context import context_of

    # One attempt per call, so one failed call is one row.
    llm_settings = settings.model_copy(
        update={
            "llm": "openai",
            "openai_api_key": "test",
            "openai_base_url": fake_openai_server.base_url,
            "llm_model": MODEL,
            "llm_max_retries": 0,
            "llm_timeout_s": 10.0,
        }
    )
    celery_app = make_celery(llm_settings)
    # Queues of its own on the shared broker: no other test's worker takes these jobs.
    celery_app.conf.broker_transport_options = {
        **celery_app.conf.broker_transport_options,
        "global_keyprefix": f"usage-{uuid.uuid4().hex[:8]}:",
    }
    app = create_app(llm_settings, queue=CeleryJobQueue(celery_app))
    runtime = app.extensions["driftless"]
    try:
        with worker_thread(celery_app):
            yield System(app.test_client(), runtime.session_factory)
    finally:
        context_of(celery_app).engine.dispose()
        runtime.engine.dispose()


def org_counters(org_id: str) -> dict[str, float]:
    """The org's call and token counters (a new org's start at nothing)."""
    samples = {
        "calls ok": ("driftless_llm_org_calls_total", {"outcome": "ok"}),
        "calls error": ("driftless_llm_org_calls_total", {"outcome": "error"}),
        "prompt tokens": ("driftless_llm_org_tokens_total", {"kind": "prompt"}),
        "completion tokens": ("driftless_llm_org_tokens_total", {"kind": "completion"}),
    }
    return {
        key: REGISTRY.get_sample_value(name, {"org": org_id, "model": MODEL, **labels}) or 0.0
        for key, (name, labels) in samples.items()
    }


def test_a_summary_the_worker_makes_is_a_usage_row_of_the_topics_org(
    system: System, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(Reply(json.dumps(SUMMARY), usage=(120, 17)))
    auth, bystander = system.new_org(), system.new_org()
    org_id, topic_id = system.close_a_topic(auth)

    topic = system.summarized(auth, topic_id)

    assert topic["summarySource"] == "llm"
    assert fake_openai.calls == 1
    assert system.rows(org_id) == [(MODEL, "summarize", "ok", 120, 17)]
    usage: Any = system.client.get("/agents-api/usage", headers=auth).json
    assert usage["byModel"] == {MODEL: {"llmCalls": 1, "promptTokens": 120, "completionTokens": 17}}
    empty: Any = system.client.get("/agents-api/usage", headers=bystander).json
    assert (empty["llmCalls"], empty["byModel"]) == (0, {})
    assert org_counters(org_id) == {
        "calls ok": 1,
        "calls error": 0,
        "prompt tokens": 120,
        "completion tokens": 17,
    }


def test_a_failed_call_is_a_usage_row_with_outcome_error_and_no_tokens(
    system: System, fake_openai: FakeOpenAI
) -> None:
    fake_openai.fail(500)
    auth = system.new_org()
    org_id, topic_id = system.close_a_topic(auth)

    topic = system.summarized(auth, topic_id)

    assert topic["summarySource"] == "fallback"  # R14
    assert fake_openai.calls == 1
    assert system.rows(org_id) == [(MODEL, "summarize", "error", 0, 0)]
    usage: Any = system.client.get("/agents-api/usage", headers=auth).json
    assert (usage["llmCalls"], usage["promptTokens"], usage["completionTokens"]) == (1, 0, 0)
    assert org_counters(org_id) == {
        "calls ok": 0,
        "calls error": 1,
        "prompt tokens": 0,
        "completion tokens": 0,
    }
