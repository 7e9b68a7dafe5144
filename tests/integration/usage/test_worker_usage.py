"""A real Celery worker (in a thread, on the real broker) calling our OpenAI-compatible
server: the summary's call is a usage row of the topic's org and moves the org's
counters, answered or failed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared.infra.config import Settings
from shared.llm.base import MAX_CALL_TOKENS
from tests.integration.usage.worker_system import System, running_system
from tests.llm_server import FakeOpenAI, Reply

MODEL = "usage-probe-model"
SUMMARY = {"title": "Billing", "summary": "PostgreSQL, Friday.", "include_in_memory": True}


@pytest.fixture(scope="module")
def system(settings: Settings, fake_openai_server: FakeOpenAI) -> Iterator[System]:
    with running_system(settings, fake_openai_server, MODEL) as running:
        yield running


def counters() -> dict[str, float]:
    """The model's call and token counters (this module's model alone: its tests take the
    difference)."""
    samples = {
        "calls ok": ("driftless_llm_calls_total", {"outcome": "ok"}),
        "calls error": ("driftless_llm_calls_total", {"outcome": "error"}),
        "prompt tokens": ("driftless_llm_tokens_total", {"kind": "prompt"}),
        "completion tokens": ("driftless_llm_tokens_total", {"kind": "completion"}),
    }
    return {
        key: REGISTRY.get_sample_value(
            name, {"model": MODEL, "purpose": "summarize", **labels}
        ) or 0.0
        for key, (name, labels) in samples.items()
    }  # fmt: skip


def counted_since(before: dict[str, float]) -> dict[str, float]:
    return {key: value - before[key] for key, value in counters().items()}


def test_a_summary_the_worker_makes_is_a_usage_row_of_the_topics_org(
    system: System, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(Reply(json.dumps(SUMMARY), usage=(120, 17)))
    auth, bystander = system.new_org(), system.new_org()
    before = counters()
    org_id, topic_id = system.close_a_topic(auth)

    topic = system.summarized(auth, topic_id)

    assert topic["summarySource"] == "llm"
    assert fake_openai.calls == 1
    assert system.rows(org_id) == [(MODEL, "summarize", "ok", 120, 17)]
    usage: Any = system.client.get("/agents-api/usage", headers=auth).json
    assert usage["byModel"] == {MODEL: {"llmCalls": 1, "promptTokens": 120, "completionTokens": 17}}
    empty: Any = system.client.get("/agents-api/usage", headers=bystander).json
    assert (empty["llmCalls"], empty["byModel"]) == (0, {})
    assert counted_since(before) == {
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
    before = counters()
    org_id, topic_id = system.close_a_topic(auth)

    topic = system.summarized(auth, topic_id)

    assert topic["summarySource"] == "fallback"  # R14
    assert fake_openai.calls == 1
    assert system.rows(org_id) == [(MODEL, "summarize", "error", 0, 0)]
    usage: Any = system.client.get("/agents-api/usage", headers=auth).json
    assert (usage["llmCalls"], usage["promptTokens"], usage["completionTokens"]) == (1, 0, 0)
    assert counted_since(before) == {
        "calls ok": 0,
        "calls error": 1,
        "prompt tokens": 0,
        "completion tokens": 0,
    }


def test_absurd_token_counts_are_clamped_and_the_orgs_limits_and_usage_still_answer_41(
    system: System, fake_openai: FakeOpenAI
) -> None:
    """A server (an org's own, above all) reports what it likes: two calls of 2e9 + 2e9
    tokens overflowed the org's int4 sum, and /limits and /usage answered 500."""
    auth = system.new_org()
    before = counters()
    for _ in range(2):
        fake_openai.queue(Reply(json.dumps(SUMMARY), usage=(2_000_000_000, 2_000_000_000)))
        org_id, topic_id = system.close_a_topic(auth)
        system.summarized(auth, topic_id)

    most = MAX_CALL_TOKENS
    assert system.rows(org_id) == [(MODEL, "summarize", "ok", most, most)] * 2
    limits = system.client.get("/agents-api/limits", headers=auth)
    assert limits.status_code == 200, limits.data
    assert limits.json["tokensUsed"] == 4 * most  # type: ignore[index]
    usage = system.client.get("/agents-api/usage", headers=auth)
    assert usage.status_code == 200, usage.data
    answered: Any = usage.json
    assert (answered["promptTokens"], answered["completionTokens"]) == (2 * most, 2 * most)
    assert counted_since(before)["prompt tokens"] == 2 * most


def test_a_negative_token_count_is_counted_as_none_and_the_summary_is_kept_41(
    system: System, fake_openai: FakeOpenAI
) -> None:
    """A negative count killed the task in the metrics counter (which refuses one): no
    usage row, and the topic never summarized."""
    fake_openai.queue(Reply(json.dumps(SUMMARY), usage=(-5, 17)))
    auth = system.new_org()
    before = counters()
    org_id, topic_id = system.close_a_topic(auth)

    topic = system.summarized(auth, topic_id)

    assert topic["summarySource"] == "llm"
    assert system.rows(org_id) == [(MODEL, "summarize", "ok", 0, 17)]
    assert counted_since(before)["prompt tokens"] == 0
    assert counted_since(before)["completion tokens"] == 17
