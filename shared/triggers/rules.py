"""The pure trigger rules: when a post is a heartbeat (R26)."""

from __future__ import annotations


def crosses_heartbeat(*, before: int, after: int, interval: int) -> bool:
    """R26: the topic's count of user + assistant messages went from `before` to `after`
    and reached or passed a multiple of `interval` on the way.

    One message reaching 10 is a heartbeat; so is a batch going from 8 to 23 (R26's
    batch decision: one evaluation, however many multiples the batch crosses). Tool
    messages are not counted (R7), so a post of tool messages alone never is one.
    """
    return after // interval > before // interval
