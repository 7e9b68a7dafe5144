"""A crontab line's five fields, checked without Celery (the domain never imports it).

What passes here is what `celery.schedules.crontab` accepts for the same field: each field
is a comma-separated list of `*`, `N` or `N-M`, each optionally followed by `/STEP`;
months and weekdays may be named (`jan`, `mon`). Weekdays run 0-6, Sunday 0.
tests/unit/test_crontab.py holds the two to agreeing.
"""

from __future__ import annotations

import re
from typing import NamedTuple

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# A step follows `*` or a range only: Celery refuses "5/15".
_PART = re.compile(r"^(?:(?P<range>\*|[a-z0-9]+-[a-z0-9]+)(?:/(?P<step>[0-9]+))?|[a-z0-9]+)$", re.I)


class CrontabFields(NamedTuple):
    """The fields by the names `celery.schedules.crontab` takes them."""

    minute: str
    hour: str
    day_of_month: str
    month_of_year: str
    day_of_week: str


# (name, lowest, highest, names that stand for lowest, lowest + 1, …)
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, MONTHS),
    ("day of week", 0, 6, WEEKDAYS),
)


def parse_crontab(line: str) -> CrontabFields:
    """The five fields of `line` ("*/30 2 * * mon-fri"); ValueError says what is wrong."""
    fields = line.split()
    if len(fields) != 5:
        raise ValueError(
            "must be a crontab line of 5 fields (minute hour day-of-month month day-of-week),"
            f" not {len(fields)}"
        )
    for value, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        for part in value.split(","):
            _check_part(part, name=name, low=low, high=high, names=names)
    return CrontabFields(*fields)


def _check_part(part: str, *, name: str, low: int, high: int, names: tuple[str, ...]) -> None:
    match = _PART.match(part)
    if match is None:
        raise ValueError(f"{name} {part!r} is not N, or * or N-M with an optional /STEP")
    step = match["step"]
    if step is not None and int(step) < 1:
        raise ValueError(f"{name} {part!r}: the step must be at least 1")
    if match["range"] == "*":
        return
    for bound in (match["range"] or part).split("-"):
        _number(bound, name=name, low=low, high=high, names=names)


def _number(token: str, *, name: str, low: int, high: int, names: tuple[str, ...]) -> int:
    if token.isdigit():
        number = int(token)
    elif token.lower()[:3] in names:  # as Celery reads a name: its first three letters
        number = low + names.index(token.lower()[:3])
    else:
        raise ValueError(f"{name} {token!r} is not a number")
    if not low <= number <= high:
        raise ValueError(f"{name} {number} is outside {low}-{high}")
    return number
