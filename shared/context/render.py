"""Rendering the stack as OpenAI chat messages, stable bytes first (R1, R3).

Everything here is deterministic: sorted keys, no timestamps, no set or dict order left
to chance. The stable prefix is one system message whose bytes change only when its
inputs do, so a provider's prompt cache keeps hitting it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shared.context.stack import (
    ContextStack,
    SemiStableLayer,
    StableLayer,
    ThreadMessage,
    VolatileLayer,
)
from shared.llm.tokens import approx_tokens

Message = dict[str, Any]


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sections(*sections: tuple[str, str]) -> str:
    """`# Heading` blocks; an empty section is left out (no tokens for nothing)."""
    return "\n\n".join(f"# {heading}\n{body}" for heading, body in sections if body.strip())


def _tool_line(tool: Any) -> str:
    spec = tool.get("function", tool) if isinstance(tool, dict) else tool
    if not isinstance(spec, dict):
        # A profile stored before [4.1] may hold a tool that is no function definition
        # (PUT /agents and the import refuse them now): shown as it is, not a failed context.
        return f"- {canonical_json(tool)}"
    name = spec.get("name", "?")
    description = " ".join(str(spec.get("description", "")).split())
    return f"- {name}: {description}" if description else f"- {name}"


def render_stable(stable: StableLayer) -> str:
    skills = "\n".join(
        f"- {skill}" if isinstance(skill, str) else f"- {canonical_json(skill)}"
        for skill in stable.skills
    )
    facts = "\n".join(
        f"- {key}: {canonical_json(value)}" for key, value in sorted(stable.durable_facts.items())
    )
    drift = ""
    if stable.drift_result is not None:
        d = stable.drift_result
        drift = f'The conversation moved on from "{d.from_title}" to "{d.to_title}".'
    return _sections(
        ("Identity", stable.soul),
        ("Skills", skills),
        ("Tools", "\n".join(_tool_line(tool) for tool in stable.tools)),
        ("Memory (earlier sessions)", stable.memory.render()),
        ("Durable facts", facts),
        ("Drift", drift),
    )


def render_semi_stable(semi: SemiStableLayer) -> str:
    topics = "\n".join(
        f"- {t.title} (summary pending)"
        if t.pending or not t.summary
        else f"- {t.title}: {t.summary}"
        for t in semi.prior_topics
    )
    return _sections(
        ("Notes for the current topic", semi.notes or ""),
        ("Earlier topics of this session", topics),
    )


def _call_id(message: ThreadMessage) -> str:
    return message.tool_call_id or f"call_{message.id}"


def _tool_call(message: ThreadMessage, arguments: Any) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": _call_id(message),
                "type": "function",
                "function": {
                    "name": message.tool_name or "tool",
                    "arguments": canonical_json(arguments),
                },
            }
        ],
    }


def _thread_messages(thread: list[ThreadMessage]) -> Iterator[Message]:
    """User and assistant messages as they are, with their speaker's `name`; a tool call
    and its result as the assistant `tool_calls` message and `tool` message a provider
    expects (a result whose call fell out of the window gets its call back, with unknown
    arguments)."""
    open_calls: set[str] = set()
    for message in thread:
        if message.role != "tool":
            # The speaker as OpenAI's format carries it; no key at all without one, so a
            # thread without names renders the bytes it did before names existed.
            named = {"name": message.name} if message.name else {}
            yield {"role": message.role, **named, "content": message.content}
            continue
        try:
            payload = json.loads(message.content)
        except ValueError:
            payload = None
        if isinstance(payload, dict) and set(payload) == {"call"}:
            open_calls.add(_call_id(message))
            yield _tool_call(message, payload["call"].get("arguments", {}))
            continue
        if _call_id(message) not in open_calls:
            yield _tool_call(message, {})
        open_calls.discard(_call_id(message))
        yield {"role": "tool", "tool_call_id": _call_id(message), "content": message.content}


def render_working_memory(volatile: VolatileLayer) -> str:
    if volatile.working_memory is None:
        return ""
    return _sections(("Working memory", canonical_json(volatile.working_memory)))


@dataclass(frozen=True)
class RenderedContext:
    messages: list[Message]
    tokens: dict[str, int]
    stable_prefix_hash: str


def render(stack: ContextStack) -> RenderedContext:
    stable = render_stable(stack.stable)
    semi = render_semi_stable(stack.semi_stable)
    thread = list(_thread_messages(stack.volatile.thread))
    working = render_working_memory(stack.volatile)
    messages: list[Message] = [{"role": "system", "content": stable}]
    if semi:
        messages.append({"role": "system", "content": semi})
    messages.extend(thread)
    if working:
        messages.append({"role": "system", "content": working})
    volatile_tokens = approx_tokens(working) + sum(approx_tokens(canonical_json(m)) for m in thread)
    tokens = {
        "stable": approx_tokens(stable),
        "semiStable": approx_tokens(semi),
        "volatile": volatile_tokens,
    }
    tokens["total"] = sum(tokens.values())
    return RenderedContext(
        messages=messages,
        tokens=tokens,
        stable_prefix_hash=hashlib.sha256(stable.encode()).hexdigest(),
    )
