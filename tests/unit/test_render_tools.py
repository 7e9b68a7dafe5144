"""The stable prefix renders every tool a stored profile holds ([4.1]): one stored before
the route refused tools that are no function definitions renders as its JSON, where it
made every context of the agent (and `POST …/messages?context=true`) a 500."""

from __future__ import annotations

from typing import Any

import pytest

from shared.context.render import render_stable
from shared.context.stack import StableLayer
from shared.memory.block import MemoryBlock


def stable_with(tools: list[Any]) -> StableLayer:
    return StableLayer(
        soul="A helper.", skills=[], tools=tools,
        memory=MemoryBlock(entries=(), tokens=0, dropped=0), durable_facts={}, drift_result=None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "line"),
    [
        ({"function": "x"}, '- {"function":"x"}'),
        ("search", '- "search"'),
        (
            {"type": "function", "function": {"name": "search", "description": "Find."}},
            "- search: Find.",
        ),
        ({"name": "lookup"}, "- lookup"),
    ],
)
def test_every_stored_tool_renders_even_one_no_longer_accepted_41(tool: Any, line: str) -> None:
    assert line in render_stable(stable_with([tool])).splitlines()
