"""Bad tool arguments are refused with the field they are about."""

from __future__ import annotations

import pytest

from shared.domain.errors import Invalid
from shared.domain.limits import Limits
from shared.tools.arguments import parse_arguments


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("notes", {"op": "$push"}, "arguments.op:"),
        ("notes", {}, "arguments.op:"),
        ("important_info", {"op": "delete"}, "arguments.op:"),
        ("notes", {"op": "$set", "content": 3}, "arguments.content:"),
        ("manage_topic_memory", {"action": "keep", "topicId": "x"}, "arguments.action:"),
    ],
)
def test_bad_tool_arguments_name_their_field(tool: str, arguments: dict, field: str) -> None:
    with pytest.raises(Invalid) as raised:
        parse_arguments(tool, arguments, limits=Limits())
    assert str(raised.value).startswith(field)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"op": "$set", "content": "a\x00b"}, "arguments.content:"),
        ({"op": "$set", "key": "k", "value": {"deep": ["\ud800"]}}, "arguments.value.deep[0]:"),
    ],
)
def test_text_the_database_cannot_store_is_refused_with_its_field(
    arguments: dict, field: str
) -> None:
    """Tool calls over MCP skip the HTTP request models: the arguments check it themselves."""
    tool = "notes" if "content" in arguments else "important_info"
    with pytest.raises(Invalid) as raised:
        parse_arguments(tool, arguments, limits=Limits())
    assert str(raised.value).startswith(field) and "cannot be stored" in str(raised.value)
