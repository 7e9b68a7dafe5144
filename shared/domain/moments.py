"""The one range rule of a moment a client sends (a query's `since`, an import's times).

A moment outside Python's years 1 to 9999 once in UTC cannot be converted
(`0001-01-01T00:00:00+14:00`); any inside them fits `timestamptz` (4713 BC to
294276 AD). Converting is also what keeps PostgreSQL's offsets: it refuses those past
±15:59 that Python reads (`-23:59`).
"""

from __future__ import annotations

from datetime import UTC, datetime

OUT_OF_RANGE = "out of range: in UTC it must fall within the years 1 to 9999"


def in_utc(value: datetime) -> datetime:
    """The aware moment in UTC; ValueError (a validation error to pydantic) when it has
    no UTC spelling."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(OUT_OF_RANGE) from None
