"""The pure rules of curation. No I/O: every function maps flags to flags (or a refusal).

A topic's memory is four flags. `keep` and `deprecated` say where it stands (R17's
tri-state is derived from them); the two `*_manually_set` flags record that a human took
a position, after which the agent and the summarizer may no longer move it (R20, R21).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from shared.topics.models import MemoryState, memory_state

AgentAction = Literal["promote", "demote", "deprecate"]
Actor = Literal["user", "agent", "summarizer"]

# R12: topics with fewer user + assistant messages are never promoted.
MIN_MEMORY_TURNS = 5

# R20, verbatim: the agent's promote/demote refused once the user has decided.
KEEP_SET_BY_USER = "keepInMemory was set manually by the user; the agent cannot override it."
DEPRECATION_SET_BY_USER = "deprecation was set manually by the user; the agent cannot override it."
DEPRECATED_TOPIC = "the topic is deprecated; only the user can un-deprecate it."

# R17: the user's toggle.
NEXT_STATE: dict[MemoryState, MemoryState] = {
    "none": "promoted",
    "promoted": "deprecated",
    "deprecated": "none",
}


@dataclass(frozen=True)
class MemoryFlags:
    keep: bool = False
    keep_manually_set: bool = False
    deprecated: bool = False
    deprecated_manually_set: bool = False

    @property
    def state(self) -> MemoryState:
        """R17's state of these flags (`shared.topics.models.memory_state`)."""
        return memory_state(keep=self.keep, deprecated=self.deprecated)


@dataclass(frozen=True)
class Refused:
    """The agent's curation was refused; `reason` is the sentence the agent sees."""

    reason: str


def user_sets_state(flags: MemoryFlags, state: MemoryState) -> MemoryFlags:
    """A user's choice (R17, R20, R21): it sets the state and marks it as the user's.

    R21's decision: choosing a state answers both questions at once, "keep it or not"
    and "is it wrong", so every user choice sets both manual flags. After `promoted` the
    agent can neither demote nor deprecate; after `none`, neither promote nor deprecate.
    """
    return MemoryFlags(
        keep=state == "promoted",
        keep_manually_set=True,
        deprecated=state == "deprecated",
        deprecated_manually_set=True,
    )


def user_cycles(flags: MemoryFlags) -> MemoryFlags:
    """The brain toggle: none → promoted → deprecated → none (R17)."""
    return user_sets_state(flags, NEXT_STATE[flags.state])


def agent_curates(flags: MemoryFlags, action: AgentAction) -> MemoryFlags | Refused:
    """The manage_topic_memory tool (R19–R21). There is no un-deprecate for the agent."""
    if action == "deprecate":
        if flags.deprecated_manually_set:
            return Refused(DEPRECATION_SET_BY_USER)
        return replace(flags, deprecated=True)
    if flags.keep_manually_set:
        return Refused(KEEP_SET_BY_USER)
    if action == "promote" and flags.deprecated:
        return Refused(DEPRECATED_TOPIC)
    return replace(flags, keep=action == "promote")


def strict_include_in_memory(answer: Any) -> bool:
    """R13: only a JSON boolean true promotes; "true", 1, null, missing all mean false."""
    return isinstance(answer, dict) and answer.get("include_in_memory") is True


def summarizer_decides(
    flags: MemoryFlags, *, include_in_memory: bool, message_count: int
) -> MemoryFlags:
    """JIT summarization's say on keep-in-memory (R11, R12, R20).

    The user's decision sticks (R20); below MIN_MEMORY_TURNS nothing is kept (R12).
    Deprecation is not the summarizer's to change.
    """
    if flags.keep_manually_set:
        return flags
    return replace(flags, keep=include_in_memory and message_count >= MIN_MEMORY_TURNS)
