"""The memory block's rendering (R18) and budget (R16), without a database."""

from __future__ import annotations

import uuid

from shared.memory.block import entry_for, fit_to_budget


def _entry(title: str, summary: str | None = None, deprecated: bool = False):  # type: ignore[no-untyped-def]
    return entry_for(topic_id=uuid.uuid4(), title=title, summary=summary, deprecated=deprecated)


def test_r18_a_deprecated_topic_shows_only_its_title() -> None:
    entry = _entry("Use MongoDB", "We chose MongoDB for the events store.", deprecated=True)
    assert entry.render() == "[DEPRECATED] Use MongoDB"
    assert entry.summary is None


def test_r11_a_promoted_topic_shows_title_and_summary() -> None:
    assert _entry("Stack", "Postgres + Redis.").render() == "Stack: Postgres + Redis."


def test_r16_over_budget_the_oldest_entries_go_first() -> None:
    entries = [_entry(f"T{i}", "x" * 36) for i in range(10)]  # 10 tokens each
    block = fit_to_budget(entries, budget=35)
    assert [e.title for e in block.entries] == ["T7", "T8", "T9"]
    assert block.dropped == 7
    assert block.tokens == 30 <= 35


def test_r16_within_budget_nothing_is_dropped() -> None:
    entries = [_entry("A", "a"), _entry("B", "b", deprecated=True)]
    block = fit_to_budget(entries, budget=2000)
    assert block.entries == tuple(entries) and block.dropped == 0
    assert block.render() == "A: a\n[DEPRECATED] B"


def test_r16_a_zero_budget_keeps_nothing() -> None:
    block = fit_to_budget([_entry("A", "a")], budget=0)
    assert block.entries == () and block.dropped == 1
