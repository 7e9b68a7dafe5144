"""Reading an import body line by line, as it arrives, and the error that names a line.

The body is never read whole: a file of millions of messages passes through one line
at a time, each bounded (shared/domain/limits.py), so a request's memory is one
session's lines (bounded by bytes: Limits.import_session_bytes) however big the file is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from shared.domain.errors import DomainError, Invalid, TooLarge
from shared.domain.limits import Limits, raw_json_depth


class LineSource(Protocol):
    """What an import reads: a file, a request's stream, anything with `readline`."""

    def readline(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class Imported:
    """What an import wrote (and skipped: sessions already imported by an earlier run)."""

    sessions: int = 0
    skipped_sessions: int = 0
    topics: int = 0
    messages: int = 0
    agents: int = 0
    facts: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "sessions": self.sessions,
            "skippedSessions": self.skipped_sessions,
            "topics": self.topics,
            "messages": self.messages,
            "agents": self.agents,
            "facts": self.facts,
        }


class MalformedLine(DomainError):
    """A line that is not JSON: a 400, like a body that is not JSON (docs/api.md)."""

    code = "malformed_json"


def refused(error: DomainError, *, line: int, before: Imported) -> DomainError:
    """`error` again, of the same class (so the same status), naming the line and what
    earlier sessions the import kept: each session is its own transaction."""
    kept = (
        f"; the {before.sessions} session(s) and {before.messages} message(s) before it were"
        " imported"
        if before.sessions
        else "; nothing was imported"
    )
    # The class's own constructor signature is (message): every error a line can raise.
    named = type(error)(f"line {line}: {error.message}{kept}")
    named.line = line  # type: ignore[attr-defined]  # for the CLI's message
    return named


def numbered_lines(stream: LineSource, *, max_bytes: int) -> Iterator[tuple[int, bytes]]:
    """(1-based number, line) of each non-blank line; TooLarge for a line past `max_bytes`."""
    number = 0
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        number += 1
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            raise LineError(number, TooLarge(f"longer than {max_bytes} bytes"))
        if raw.strip():
            yield number, raw


class LineError(Exception):
    """A refused line, before the importer adds what it kept."""

    def __init__(self, line: int, error: DomainError) -> None:
        super().__init__(error.message)
        self.line = line
        self.error = error


def check_depth(raw: bytes, *, limits: Limits) -> None:
    """Invalid past the configured nesting, read before parsing: the parser recurses."""
    if raw.count(b"[") + raw.count(b"{") <= limits.max_json_depth:
        return
    if raw_json_depth(raw.decode("utf-8", errors="replace")) > limits.max_json_depth:
        raise Invalid(f"nested deeper than {limits.max_json_depth} levels")


def load_json(raw: bytes, *, limits: Limits) -> Any:
    """A line as JSON (bounded depth), or MalformedLine."""
    check_depth(raw, limits=limits)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise MalformedLine(f"not JSON: {exc}") from None
