"""The pure trigger rules: when a message is a heartbeat (R26)."""

from __future__ import annotations


def is_heartbeat(*, role: str, message_count: int, interval: int) -> bool:
    """R26: the topic's user + assistant messages just reached a multiple of `interval`.

    `message_count` is the topic's count after the message was stored. Tool messages are
    not counted (R7), so they are never a heartbeat.
    """
    return role != "tool" and message_count % interval == 0
