"""Each org's calls reach its own model server and only it: two scripted servers, two
orgs, and the fleet's server for everyone else; a failing server rests its own org's
calls (the breaker) and no one else's; a DELETE sends the org back to the fleet's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest
from sqlalchemy.orm import Session, sessionmaker

from shared.bootstrap import Runtime
from shared.infra.config import Settings
from shared.infra.metrics import OWN_MODEL
from shared.llm.base import LLMError, SummaryRequest, TranscriptLine
from shared.llm.factory import make_llm
from shared.providers.breaker import Breaker
from shared.providers.routing import OrgRoutedLLM, provider_builder
from shared.providers.service import delete_provider
from shared.usage.service import UsageLedger
from tests.integration.providers.orgs import BOX, new_org, new_uow
from tests.integration.usage.ledger import rows_of
from tests.llm_server import FakeOpenAI

SUMMARY = json.dumps({"title": "Billing", "summary": "Postgres.", "include_in_memory": True})
LINES = [TranscriptLine(id=1, role="user", content="Let's use Postgres for billing.")]


@pytest.fixture
def servers() -> Iterator[tuple[FakeOpenAI, FakeOpenAI]]:
    with FakeOpenAI() as first, FakeOpenAI() as second:
        first.answer(SUMMARY)
        second.answer(SUMMARY)
        yield first, second


@pytest.fixture
def llm_settings(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    fake_openai.answer(SUMMARY)
    return settings.model_copy(
        update={
            "llm": "openai",
            "openai_api_key": "fleet-key",
            "openai_base_url": fake_openai.base_url,
            "llm_model": "fleet-model",
            "llm_max_retries": 0,
            "llm_timeout_s": 2.0,
            "webhook_allow_private": True,  # the scripted servers are on 127.0.0.1
        }
    )


def _routed(
    settings: Settings, factory: sessionmaker[Session], *, breaker: Breaker | None = None
) -> OrgRoutedLLM:
    ledger = UsageLedger(lambda: new_uow(factory))
    return OrgRoutedLLM(
        make_llm(settings, on_call=ledger),
        new_uow=lambda: new_uow(factory),
        box=BOX,
        build=provider_builder(settings, calls=2, on_call=ledger),
        breaker=breaker,
        refresh_s=0,  # every call reads the map: a DELETE shows at once
    )


def _summarize(llm: OrgRoutedLLM, org_id: uuid.UUID | None) -> str:
    return llm.summarize(SummaryRequest(lines=LINES, org_id=org_id)).model


def test_each_orgs_calls_reach_only_its_own_server_and_the_others_the_fleets(
    llm_settings: Settings,
    session_factory: sessionmaker[Session],
    servers: tuple[FakeOpenAI, FakeOpenAI],
    fake_openai: FakeOpenAI,
) -> None:
    first, second = servers
    org_a = new_org(session_factory, server=first, model="model-a")
    org_b = new_org(session_factory, server=second, model="model-b")
    org_c = new_org(session_factory, server=None)
    llm = _routed(llm_settings, session_factory)

    answered = [_summarize(llm, org) for org in (org_a, org_b, org_a, org_c, None)]

    assert answered == ["model-a", "model-b", "model-a", "fleet-model", "fleet-model"]
    assert [r["model"] for r in first.requests] == ["model-a", "model-a"]
    assert [r["model"] for r in second.requests] == ["model-b"]
    assert [r["model"] for r in fake_openai.requests] == ["fleet-model", "fleet-model"]
    # Usage by model per org, as before: the org's own model's name.
    assert [row[:3] for row in rows_of(session_factory, org_a)] == [
        ("model-a", "summarize", "ok"),
        ("model-a", "summarize", "ok"),
    ]
    assert [row[0] for row in rows_of(session_factory, org_c)] == ["fleet-model"]


def test_a_failing_server_opens_its_orgs_breaker_and_no_one_elses(
    llm_settings: Settings,
    session_factory: sessionmaker[Session],
    servers: tuple[FakeOpenAI, FakeOpenAI],
    fake_openai: FakeOpenAI,
) -> None:
    first, second = servers
    first.fail(401)  # a revoked key
    org_a = new_org(session_factory, server=first, model="model-a")
    org_b = new_org(session_factory, server=second, model="model-b")
    llm = _routed(llm_settings, session_factory, breaker=Breaker(threshold=5, cooldown_s=60))

    for _ in range(8):
        with pytest.raises(LLMError):  # each one a fallback summary (R14)
            _summarize(llm, org_a)
        assert _summarize(llm, org_b) == "model-b"
        assert _summarize(llm, None) == "fleet-model"

    assert first.calls == 5  # the breaker opened: the last three never left the process
    assert (second.calls, fake_openai.calls) == (8, 8)
    outcomes = [row[2] for row in rows_of(session_factory, org_a)]
    assert outcomes == ["error"] * 5  # calls made are counted; calls refused are none


def test_a_deleted_provider_sends_the_org_back_to_the_fleet(
    llm_settings: Settings,
    session_factory: sessionmaker[Session],
    servers: tuple[FakeOpenAI, FakeOpenAI],
    fake_openai: FakeOpenAI,
) -> None:
    first, _ = servers
    org_a = new_org(session_factory, server=first, model="model-a")
    llm = _routed(llm_settings, session_factory)
    assert _summarize(llm, org_a) == "model-a"

    with new_uow(session_factory) as uow:
        delete_provider(uow=uow, org_id=org_a)
        uow.commit()

    assert _summarize(llm, org_a) == "fleet-model"
    assert (first.calls, fake_openai.calls) == (1, 1)


def test_a_private_base_url_is_refused_at_the_connection_too(
    llm_settings: Settings,
    session_factory: sessionmaker[Session],
    servers: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    """Set while private addresses were allowed (or rebound since): no connection made."""
    first, _ = servers
    org_a = new_org(session_factory, server=first, model="model-a")
    strict = llm_settings.model_copy(update={"webhook_allow_private": False})
    llm = _routed(strict, session_factory)

    with pytest.raises(LLMError, match="not a public address"):
        _summarize(llm, org_a)
    assert first.calls == 0


def test_the_bootstrap_routes_the_processes_llm_by_org(
    llm_settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    llm: Any = Runtime(llm_settings, session_factory=session_factory).llm
    while not isinstance(llm, OrgRoutedLLM):
        llm = llm.inner
    assert llm.model == "fleet-model"


def test_an_orgs_own_model_name_is_no_metric_label_41(
    llm_settings: Settings,
    session_factory: sessionmaker[Session],
    servers: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    """An org names its model as it likes: as a label each name would be a series on the
    worker's unauthenticated /metrics for good. Its calls are counted as "own"."""
    chosen = f"secret-project-{uuid.uuid4().hex}"
    org = new_org(session_factory, server=servers[0], model=chosen)
    llm = _routed(llm_settings, session_factory)
    own = {"model": OWN_MODEL, "purpose": "summarize", "outcome": "ok"}
    before = REGISTRY.get_sample_value("driftless_llm_calls_total", own) or 0.0

    assert _summarize(llm, org) == chosen

    exported = generate_latest(REGISTRY).decode()
    assert chosen not in exported
    assert REGISTRY.get_sample_value("driftless_llm_calls_total", own) == before + 1
    assert str(org) not in exported  # no metric names an org (its traces do)
    assert [row[0] for row in rows_of(session_factory, org)] == [chosen]  # the ledger keeps it
