from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from shared.infra.config import Settings
from shared.infra.fair import FairQueue
from tests.integration.reevaluations.system import System, campaign_system, clear_fair_lists
from tests.llm_server import FakeOpenAI


@pytest.fixture
def system(settings: Settings, fake_openai: FakeOpenAI) -> Iterator[System]:
    """The web sending model jobs through the orgs' lists, workers on demand, a database
    of the test alone (tests/integration/reevaluations/system.py)."""
    with campaign_system(settings, fake_openai, fair=True) as built:
        yield built


@pytest.fixture
def fair(redis_url: str) -> Iterator[FairQueue]:
    """The orgs' lists in the suite's Redis, empty before and after the test."""
    client = redis.Redis.from_url(redis_url)
    clear_fair_lists(client)
    try:
        yield FairQueue(client)
    finally:
        clear_fair_lists(client)
        client.close()
