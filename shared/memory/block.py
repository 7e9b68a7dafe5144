"""The memory block of a scope, built from its topics: pure, so the budget rule is testable."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from shared.llm.tokens import approx_tokens

UNTITLED = "Untitled topic"


@dataclass(frozen=True)
class MemoryEntry:
    topic_id: uuid.UUID
    title: str
    summary: str | None  # None for a deprecated topic: its title is its whole trace (R18)
    deprecated: bool

    def render(self) -> str:
        """The entry as the agent reads it in the stable prefix."""
        if self.deprecated:
            return f"[DEPRECATED] {self.title}"
        return f"{self.title}: {self.summary}" if self.summary else self.title

    @property
    def tokens(self) -> int:
        return approx_tokens(self.render())


@dataclass(frozen=True)
class MemoryBlock:
    entries: tuple[MemoryEntry, ...]  # oldest first
    tokens: int
    dropped: int  # oldest entries left out to stay within the budget (R16)

    def render(self) -> str:
        return "\n".join(entry.render() for entry in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": [{**asdict(e), "topic_id": str(e.topic_id)} for e in self.entries],
            "tokens": self.tokens,
            "dropped": self.dropped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MemoryBlock:
        entries = tuple(
            MemoryEntry(**{**e, "topic_id": uuid.UUID(e["topic_id"])}) for e in data["entries"]
        )
        return cls(entries=entries, tokens=data["tokens"], dropped=data["dropped"])


def entry_for(
    *, topic_id: uuid.UUID, title: str | None, summary: str | None, deprecated: bool
) -> MemoryEntry:
    """A promoted topic shows title and summary; a deprecated one only its title (R18)."""
    return MemoryEntry(
        topic_id=topic_id,
        title=title or UNTITLED,
        summary=None if deprecated else summary,
        deprecated=deprecated,
    )


def fit_to_budget(entries_oldest_first: Sequence[MemoryEntry], budget: int) -> MemoryBlock:
    """Keep the newest entries that fit in `budget` tokens; the oldest go first (R16)."""
    kept: list[MemoryEntry] = []
    total = 0
    for entry in reversed(entries_oldest_first):
        if total + entry.tokens > budget:
            break
        kept.append(entry)
        total += entry.tokens
    kept.reverse()
    return MemoryBlock(
        entries=tuple(kept), tokens=total, dropped=len(entries_oldest_first) - len(kept)
    )
