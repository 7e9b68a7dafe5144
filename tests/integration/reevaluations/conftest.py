from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.infra.config import Settings
from tests.integration.reevaluations.system import System, campaign_system
from tests.llm_server import FakeOpenAI


@pytest.fixture
def system(settings: Settings, fake_openai: FakeOpenAI) -> Iterator[System]:
    """The web, workers on demand and a database of the test alone (system.py)."""
    with campaign_system(settings, fake_openai) as built:
        yield built
