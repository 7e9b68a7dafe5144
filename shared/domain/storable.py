"""Text PostgreSQL cannot store, refused at the edge (it would otherwise be a 500).

Both the HTTP API's request models and the tool arguments (HTTP and MCP) check with it.
"""

from __future__ import annotations

from typing import Any


def unstorable_at(value: Any, where: str) -> str | None:
    """Where `value` holds text PostgreSQL cannot store: a NUL (text and jsonb refuse it)
    or an unpaired surrogate (not encodable as UTF-8); None when all of it is storable."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return where if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            found = unstorable_at(key, inner) or unstorable_at(item, inner)
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = unstorable_at(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def storable(value: Any) -> Any:
    """A before-validator: refuse input the database would reject (a 500 otherwise)."""
    where = unstorable_at(value, "")
    if where is not None:
        at = f" (at {where!r})" if where else ""
        raise ValueError(
            f"text with a NUL character (\\u0000) or an unpaired surrogate cannot be stored{at}"
        )
    return value
