"""A real worker (its LLM built by the bootstrap) holds an org past its monthly tokens to
R14's fallback without a call reaching the model server; another org's summary is the
model's as ever."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared.infra.config import Settings
from tests.integration.orgs.budget import give_budget, spend
from tests.integration.usage.worker_system import System, running_system
from tests.integration.webhooks.outbox import org_of
from tests.llm_server import FakeOpenAI

SUMMARY = {"title": "Billing", "summary": "PostgreSQL, Friday.", "include_in_memory": True}


@pytest.fixture(scope="module")
def system(settings: Settings, fake_openai_server: FakeOpenAI) -> Iterator[System]:
    with running_system(settings, fake_openai_server, "budget-probe-model") as running:
        yield running


def test_r14_the_worker_gives_an_org_past_its_tokens_a_fallback_and_asks_no_model(
    system: System, fake_openai: FakeOpenAI
) -> None:
    fake_openai.answer_json(SUMMARY)
    auth, bystander = system.new_org(), system.new_org()
    org_id = org_of(system.factory, auth)
    give_budget(system.factory, org_id, monthly_tokens=500)
    spend(system.factory, org_id, 500)

    _, topic_id = system.close_a_topic(auth)
    topic = system.summarized(auth, topic_id)

    assert (topic["summarySource"], topic["memoryState"]) == ("fallback", "none")
    assert fake_openai.calls == 0
    usage: Any = system.client.get("/agents-api/usage", headers=auth).json
    assert usage["budgetExhausted"] is True

    _, other_topic = system.close_a_topic(bystander)
    theirs = system.summarized(bystander, other_topic)
    assert (theirs["summarySource"], theirs["memoryState"]) == ("llm", "promoted")
    assert fake_openai.calls == 1
