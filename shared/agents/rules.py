"""What an agent profile may hold, whoever writes it (PUT /agents, an import).

The stable prefix renders every tool by its function's name and description
(shared/context/render.py) and a client hands the list to its model as is, so a tool
that is not a function definition is refused when written, not when every later context
is built from it.
"""

from __future__ import annotations

import re
from typing import Any

from shared.domain.errors import Invalid
from shared.domain.limits import (
    MAX_AGENT_SKILLS,
    MAX_AGENT_TOOLS,
    MAX_SOUL_CHARS,
    Limits,
    check_json,
)

# OpenAI's rule for a function's name, which the providers a client calls share.
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
FUNCTION_SHAPE = (
    'an OpenAI function definition: {"type": "function", "function": {"name", '
    '"description"?, "parameters"?}}, or its "function" object alone'
)


def check_profile(*, soul: str, skills: list[Any], tools: list[Any], limits: Limits) -> None:
    """Invalid, naming the field, unless the profile is one the context can render."""
    if len(soul) > MAX_SOUL_CHARS:
        raise Invalid(f"soul: {len(soul)} characters; a soul holds at most {MAX_SOUL_CHARS}")
    for name, items, most in (
        ("skills", skills, MAX_AGENT_SKILLS),
        ("tools", tools, MAX_AGENT_TOOLS),
    ):
        if len(items) > most:
            raise Invalid(f"{name}: {len(items)} items; a profile holds at most {most}")
    check_json(skills, field="skills", limits=limits)
    check_json(tools, field="tools", limits=limits)
    for index, tool in enumerate(tools):
        check_tool(tool, at=f"tools.{index}")


def check_tool(tool: Any, *, at: str) -> None:
    """Invalid unless `tool` is a function definition (wrapped or bare)."""
    if not isinstance(tool, dict):
        raise Invalid(f"{at}: not an object; a tool is {FUNCTION_SHAPE}")
    if "function" in tool or "type" in tool:
        if tool.get("type") != "function":
            raise Invalid(f'{at}.type: must be "function"; a tool is {FUNCTION_SHAPE}')
        at, tool = f"{at}.function", tool.get("function")
        if not isinstance(tool, dict):
            raise Invalid(f"{at}: not an object; a tool is {FUNCTION_SHAPE}")
    name = tool.get("name")
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        raise Invalid(f"{at}.name: 1 to 64 letters, digits, _ or -; a tool is {FUNCTION_SHAPE}")
    if not isinstance(tool.get("description", ""), str):
        raise Invalid(f"{at}.description: a string")
    if not isinstance(tool.get("parameters", {}), dict):
        raise Invalid(f"{at}.parameters: a JSON Schema object")
