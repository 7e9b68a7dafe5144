"""The provider tests' settings and Redis: DRIFTLESS_EMBEDDINGS=openai on the scripted
server (tests/llm_server.py), and a Redis without earlier tests' cached query vectors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from shared.embeddings.query import KEY_PREFIX
from shared.infra.config import Settings
from tests.llm_server import FakeOpenAI

MODEL = "embed-model"


def embeddings_on(settings: Settings, fake: FakeOpenAI) -> Settings:
    """`settings` with embeddings from `fake`; one attempt of 2 s a call."""
    return settings.model_copy(
        update={
            "embeddings": "openai",
            "openai_base_url": fake.base_url,
            "openai_api_key": "fleet-key",
            "embeddings_model": MODEL,
            "llm_max_retries": 0,
            "llm_timeout_s": 2.0,
            "webhook_allow_private": True,  # the scripted servers are on 127.0.0.1
        }
    )


@contextmanager
def clean_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{KEY_PREFIX}*"):
        client.delete(key)
    try:
        yield client
    finally:
        client.close()
