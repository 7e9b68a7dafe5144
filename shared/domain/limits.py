"""What a client may store, checked in the domain so HTTP, tools and MCP share every cap.

A limit enforced only in a view is skipped by the tool path: five `important_info $set`
of 200 KB once built a 1 MB facts document (a 250k-token stable prefix) although
`PUT /facts` refused 64 KB. Every writer of a thing calls the check of that thing here,
before anything is written.

JSON documents get two more checks. Nesting deeper than `max_json_depth` is refused,
because serializing a deep document fails (pydantic stops at depth 255, recursion at
~1000) and a stored one would break every later read of it. Non-finite numbers (NaN,
Infinity, what 1e999 parses to) are refused because they are not JSON: they would be
rendered into a prompt as `NaN` and answered as invalid JSON.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from shared.domain.errors import Invalid, TooLarge

DEFAULT_MAX_JSON_DEPTH = 32
DEFAULT_SEARCHES_PER_ORG = 4
# Imports (shared/portability/) running at once per org over HTTP, across the fleet.
DEFAULT_IMPORTS_PER_ORG = 2
# One session's lines, held in memory until they are written in one short transaction
# (no transaction waits on the client): a larger session is a 413.
DEFAULT_IMPORT_SESSION_BYTES = 64 * 1024 * 1024
# Exports (shared/portability/) streaming at once per org, across the fleet: each holds a
# pooled connection for as long as its client reads.
MAX_EXPORTS_PER_ORG = 2
# agentId and userId, and a fact's key: characters (code points), as PostgreSQL's
# varchar(200) counts them. They travel in request lines too, so the web's
# `--limit-request-line` (Procfile) is sized from these: see the arithmetic there.
MAX_SCOPE_ID_CHARS = 200
MAX_FACT_KEY_CHARS = 200
MAX_MESSAGE_CHARS = 100_000
# Who spoke a message (a speaker's name): OpenAI's rule for a chat message's `name`, so
# that the context handed to an agent (shared/context/render.py) passes to any
# OpenAI-compatible provider as it is, even the ones that hold `name` to this pattern.
# ASCII on purpose: "José" is refused there, so it is refused here, where the client
# can still choose "Jose".
MAX_MESSAGE_NAME_CHARS = 64
MESSAGE_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# Messages of one POST …/messages: enough to import a history in few requests, while one
# request's transaction (and its row locks) stays short.
MAX_BATCH_MESSAGES = 1_000
MAX_FACTS_BYTES = 64 * 1024
MAX_FACT_VALUE_BYTES = 16 * 1024
MAX_WORKING_MEMORY_BYTES = 16 * 1024
MAX_NOTES_CHARS = 20_000
# A topic's title as a client names it (POST …/topics); the summarizer keeps 120. Both
# it and the summary are rendered into every later prompt of the scope (R1, R2).
MAX_TOPIC_TITLE_CHARS = 500
MAX_SUMMARY_CHARS = 2000
# An agent profile (the stable prefix's inputs, R1), whoever writes it: PUT /agents or
# an import. Its tools are function definitions (shared/agents/rules.py).
MAX_SOUL_CHARS = 50_000
MAX_AGENT_SKILLS = 200
MAX_AGENT_TOOLS = 200
# A tool call is stored as one message (R7); this leaves room for its JSON envelope.
MAX_TOOL_ARGUMENTS_CHARS = 50_000
# Import (shared/portability/): the body is streamed, so what bounds a request's memory
# is one session's lines (Limits.import_session_bytes), not the file. A line holds one message of
# MAX_MESSAGE_CHARS (4 bytes a character at worst) with room for its JSON escapes.
MAX_IMPORT_LINE_BYTES = 1024 * 1024
# One session of a chat history is one line: a conversation, not a message.
MAX_IMPORT_CHAT_LINE_BYTES = 16 * 1024 * 1024
# Lines of one session (its topics, messages, notes, curation): one transaction.
MAX_IMPORT_SESSION_LINES = 500_000
# A whole import body (413 past it): a large org's export, read as it arrives.
MAX_IMPORT_BYTES = 4 * 1024 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """The configurable part of the limits (DRIFTLESS_MAX_JSON_DEPTH, …_SEARCHES_PER_ORG)."""

    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    # Searches (HTTP and the recall tool) running at once per org, across the fleet.
    searches_per_org: int = DEFAULT_SEARCHES_PER_ORG
    imports_per_org: int = DEFAULT_IMPORTS_PER_ORG
    import_session_bytes: int = DEFAULT_IMPORT_SESSION_BYTES


def json_size(value: Any) -> int:
    """Bytes of `value` as JSON (UTF-8, no padding): what a size limit counts."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def check_json(value: Any, *, field: str, limits: Limits) -> None:
    """Invalid unless `value` nests at most `limits.max_json_depth` deep and every number
    in it is finite. Iterative: it must not itself recurse on the input it refuses."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limits.max_json_depth:
                raise Invalid(
                    f"{field}: nested deeper than {limits.max_json_depth} levels"
                    " (DRIFTLESS_MAX_JSON_DEPTH)"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            raise Invalid(f"{field}: {item} is not a JSON number (NaN and infinities are refused)")


def check_size(value: Any, *, what: str, max_bytes: int) -> None:
    """TooLarge when `value` as JSON passes `max_bytes`."""
    if json_size(value) > max_bytes:
        raise TooLarge(f"{what} would exceed {max_bytes} bytes")


def check_message_content(content: str) -> None:
    if len(content) > MAX_MESSAGE_CHARS:
        raise Invalid(
            f"content: {len(content)} characters; a message holds at most {MAX_MESSAGE_CHARS}"
        )


_MESSAGE_NAME = re.compile(MESSAGE_NAME_PATTERN)


def check_message_name(name: str | None, *, role: str, field: str = "name") -> None:
    """Invalid unless `name` (who spoke) is None, or follows MESSAGE_NAME_PATTERN on a user
    or assistant message: a tool message names its tool in toolName, not a speaker."""
    if name is None:
        return
    # fullmatch: `$` alone would let one trailing newline through.
    if not isinstance(name, str) or _MESSAGE_NAME.fullmatch(name) is None:
        raise Invalid(
            f"{field}: 1 to {MAX_MESSAGE_NAME_CHARS} characters, each an ASCII letter, a digit,"
            f" '_' or '-' (OpenAI's rule for a message's name); {str(name)[:80]!r} is not"
        )
    if role == "tool":
        raise Invalid(f"{field}: only user and assistant messages carry a speaker's name")


def check_notes(content: str) -> None:
    # Active notes are injected every turn (R23): appends must not grow them without end.
    if len(content) > MAX_NOTES_CHARS:
        raise TooLarge(
            f"the topic's notes would exceed {MAX_NOTES_CHARS} characters;"
            " rewrite them shorter with `update`"
        )


def check_title(title: str | None, *, field: str = "title") -> None:
    """Invalid when a topic's title is longer than a client may name it."""
    if title is not None and len(title) > MAX_TOPIC_TITLE_CHARS:
        raise Invalid(f"{field}: {len(title)} characters; at most {MAX_TOPIC_TITLE_CHARS}")


def check_summary(summary: str | None) -> None:
    """Invalid when a summary is longer than the summarizer keeps (the prompt's cap)."""
    if summary is not None and len(summary) > MAX_SUMMARY_CHARS:
        raise Invalid(f"summary: {len(summary)} characters; at most {MAX_SUMMARY_CHARS}")


# Strings first (they may hold brackets), then the brackets that remain.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def raw_json_depth(text: str) -> int:
    """How deep `text` nests, read without parsing it: the parser itself recurses, so a
    body of 100,000 `[` must be refused before it reaches the parser."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _refuse_constant(name: str) -> Any:
    raise Invalid(f"body: {name} is not a JSON number (NaN and infinities are refused)")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise Invalid(f"body: the number {text[:40]} is out of range")
    return number


def loads_checked(text: str, *, limits: Limits) -> Any:
    """`json.loads` for input from outside: too deep or non-finite numbers are Invalid;
    malformed JSON raises ValueError as `json.loads` does."""
    # A document cannot nest deeper than it has opening brackets: two C-speed counts
    # spare the common body (a chat message, a handful of brackets) the full scan.
    openers = text.count("[") + text.count("{")
    if openers > limits.max_json_depth and raw_json_depth(text) > limits.max_json_depth:
        raise Invalid(
            f"body: nested deeper than {limits.max_json_depth} levels (DRIFTLESS_MAX_JSON_DEPTH)"
        )
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


# --- an org's own limits (`driftless orgs set`) -------------------------------------------


@dataclass(frozen=True)
class LimitRange:
    """The values one of an org's limits may take: 0 (no limit) where `zero` allows it,
    else `least` to `most`, whole numbers where `whole`."""

    flag: str  # as `driftless orgs set` spells it
    what: str
    least: float
    most: float
    whole: bool
    zero: bool = True

    def allows(self, value: Any) -> bool:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and math.isfinite(value)) or (self.whole and not float(value).is_integer()):
            return False
        return bool((self.zero and value == 0) or self.least <= value <= self.most)

    def range(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        return f"{kind} from {self.least:g} to {self.most:g}" + (
            ", or 0 (no limit)" if self.zero else ""
        )

    def check(self, value: Any) -> float:
        """`value`, or Invalid naming the flag and the range."""
        if not self.allows(value):
            raise Invalid(
                f"{self.flag}: {self.what} must be {self.range()}, or 'default' (the"
                f" fleet's); {value!r} is not"
            )
        return float(value)


# Bounds that keep each limit meaning what it says. The request bucket's key expires once
# it would be full again, burst / rate seconds on: at 1e-20 a second that overflowed and
# the limiter let everything through; at the least rate and the most burst it is 32 years,
# which Redis holds. The most of each is far past any real org's use.
ORG_LIMITS = {
    "requests_per_s": LimitRange(
        "--requests-per-s", "requests a second", least=0.001, most=1_000_000, whole=False
    ),
    "request_burst": LimitRange(
        "--request-burst", "the request burst", least=1, most=1_000_000, whole=True, zero=False
    ),
    "llm_rpm": LimitRange("--llm-rpm", "LLM calls a minute", least=1, most=1_000_000, whole=True),
    "monthly_tokens": LimitRange(
        "--monthly-tokens", "monthly tokens", least=1, most=10**15, whole=True
    ),
}
