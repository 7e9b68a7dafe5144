"""A provider that echoes the key in its error body ([4.1], probe item 11): the key is in
neither the error (what a summary or an evaluation stores as its `error`) nor the log."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy.orm import Session, sessionmaker

from shared.embeddings.provider import EmbeddingsError, make_embedder
from shared.infra.config import Settings
from shared.llm.base import LLMError, SummaryRequest, TranscriptLine
from shared.llm.factory import make_llm
from shared.providers.routing import OrgRoutedLLM, provider_builder
from shared.providers.service import set_provider
from tests.integration.embeddings.standin_env import embeddings_on
from tests.integration.providers.orgs import BOX, new_org, new_uow
from tests.llm_server import FakeOpenAI

ORG_KEY = "sk-org-own-9d8c7b6a5f4e3d2c1b0a"
FLEET_KEY = "sk-fleet-0a1b2c3d4e5f6a7b8c9d"
REQUEST_LINES = [TranscriptLine(id=1, role="user", content="Let's use Postgres.")]


def test_an_orgs_key_echoed_in_a_401_is_redacted_from_the_error_and_the_log_41(
    settings: Settings,
    session_factory: sessionmaker[Session],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FakeOpenAI() as own, FakeOpenAI() as fleet:
        own.fail(401, echo_key=True)
        org_id = new_org(session_factory, server=None)
        with new_uow(session_factory) as uow:
            set_provider(
                uow=uow, org_id=org_id, base_url=own.base_url, api_key=ORG_KEY, model="m",
                box=BOX, allow_private=True,
            )  # fmt: skip
            uow.commit()
        local = settings.model_copy(
            update={"llm": "openai", "openai_base_url": fleet.base_url, "llm_max_retries": 0,
                    "webhook_allow_private": True}
        )  # fmt: skip
        llm = OrgRoutedLLM(
            make_llm(local), new_uow=lambda: new_uow(session_factory), box=BOX,
            build=provider_builder(local, calls=1, on_call=None), refresh_s=0,
        )  # fmt: skip

        with caplog.at_level(logging.INFO), pytest.raises(LLMError) as failed:
            llm.summarize(SummaryRequest(lines=REQUEST_LINES, org_id=org_id))

    assert own.calls == 1  # the org's server was asked, and answered with the key
    assert "HTTP 401" in str(failed.value) and "[redacted]" in str(failed.value)
    assert ORG_KEY not in str(failed.value)
    assert ORG_KEY not in caplog.text


def test_the_fleets_embeddings_key_echoed_in_a_401_is_redacted_41(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeOpenAI() as fake:
        fake.embeddings_fail(401, echo_key=True)
        keyed = embeddings_on(settings, fake).model_copy(update={"openai_api_key": FLEET_KEY})
        embedder = make_embedder(keyed)
        assert embedder is not None

        with caplog.at_level(logging.INFO), pytest.raises(EmbeddingsError) as failed:
            embedder.embed(["Postgres for billing"])

    assert "[redacted]" in str(failed.value)
    assert FLEET_KEY not in str(failed.value)
    assert FLEET_KEY not in caplog.text
