"""A message's name ([4.3]), without a database: the domain's rule at its edges, the
web schema's pattern agreeing with it (the OpenAPI document shows the schema's), and the
context rendering the name as OpenAI's `name` only where there is one."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.context.render import render
from shared.context.stack import (
    ContextStack,
    SemiStableLayer,
    StableLayer,
    ThreadMessage,
    VolatileLayer,
)
from shared.domain.errors import Invalid
from shared.domain.limits import check_message_name
from shared.memory.block import MemoryBlock
from web.schemas.sessions import MessageIn

GOOD = ["a", "Caroline", "anne_marie", "Jean-Luc", "agent-7", "_", "-", "x" * 64]
BAD = ["", " ", "Anne Marie", "José", "x" * 65, "Caroline\n", "\nCaroline", "a.b", "O'Brien",
       "<|im_end|>", "a\u0000b", "Ｃaroline"]  # fmt: skip


@pytest.mark.parametrize("name", GOOD)
def test_openais_rule_admits_letters_digits_underscores_and_dashes_up_to_64_43(name: str) -> None:
    check_message_name(name, role="user")
    check_message_name(name, role="assistant")
    assert MessageIn.model_validate({"role": "user", "content": "x", "name": name}).name == name


@pytest.mark.parametrize("name", BAD, ids=repr)
def test_anything_else_is_invalid_in_the_domain_and_in_the_schema_alike_43(name: str) -> None:
    with pytest.raises(Invalid, match=r"^name: 1 to 64 characters"):
        check_message_name(name, role="user")
    with pytest.raises(ValidationError):
        MessageIn.model_validate({"role": "user", "content": "x", "name": name})


def test_no_name_is_fine_and_a_tool_message_takes_none_43() -> None:
    check_message_name(None, role="tool")
    with pytest.raises(Invalid, match=r"^messages\.2\.name: only user and assistant"):
        check_message_name("Caroline", role="tool", field="messages.2.name")


def _stack(*thread: ThreadMessage) -> ContextStack:
    empty = MemoryBlock(entries=(), tokens=0, dropped=0)
    return ContextStack(
        stable=StableLayer(
            soul="s", skills=[], tools=[], memory=empty, durable_facts={}, drift_result=None
        ),
        semi_stable=SemiStableLayer(notes=None, prior_topics=[]),
        volatile=VolatileLayer(thread=list(thread), tool_results=[], working_memory=None),
    )


def test_the_context_renders_a_name_as_openais_name_and_no_key_without_one_43() -> None:
    named = ThreadMessage(1, "user", "Hi", None, None, name="Caroline")
    plain = ThreadMessage(2, "assistant", "Hello", None, None)
    rendered: list[dict[str, Any]] = render(_stack(named, plain)).messages[1:]
    assert rendered == [
        {"role": "user", "name": "Caroline", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
    ]
