"""The client's provider methods against the real system: an org's own model set, shown
without its key, refused with the field named, and removed back to the fleet's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from driftless_client import ApiError, Client
from tests.client.conftest import System

API_KEY = "sk-client-own-9d2f"


@pytest.fixture
def client(system: System, org_key: str) -> Iterator[Client]:
    with Client(system.base_url, org_key) as client:
        yield client


def test_an_org_sets_its_own_model_sees_it_without_the_key_and_removes_it(
    client: Client,
) -> None:
    fleet = client.provider()
    assert (fleet["source"], fleet["baseUrl"]) == ("fleet", None)

    # The system allows private addresses (its webhook receivers are on 127.0.0.1).
    shown = client.set_provider(API_KEY, "own-model", base_url="http://127.0.0.1:9/v1")

    assert (shown["source"], shown["model"]) == ("org", "own-model")
    assert client.provider() == shown
    assert API_KEY not in repr(shown) and "apiKey" not in shown
    assert client.delete_provider() is None
    assert client.provider() == fleet


def test_a_refused_base_url_is_an_api_error_naming_it(client: Client) -> None:
    with pytest.raises(ApiError) as raised:
        client.set_provider(API_KEY, "own-model", base_url="ftp://127.0.0.1/v1")

    assert raised.value.status == 422
    assert raised.value.message.startswith("baseUrl:")
    assert client.provider()["source"] == "fleet"  # nothing written
