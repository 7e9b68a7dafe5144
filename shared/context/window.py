"""Which trailing messages of the active topic the volatile suffix holds (R2).

`sliding` keeps exactly the last `size` messages, so every new message moves the
thread's start and a provider's prompt cache never reaches into the thread. `block`
keeps between `size - block + 1` and `size` messages: the start moves only when the
thread outgrows `size`, and then by `block` messages at once, so between trims every
turn's prompt begins with the previous turn's thread. Either way at most `size`.
"""

from __future__ import annotations

from typing import Literal

WindowMode = Literal["block", "sliding"]


def window_start(total: int, *, size: int, block: int, mode: WindowMode) -> int:
    """The 0-based position in the topic of the first message the window holds."""
    if total <= size:
        return 0
    if mode == "sliding":
        return total - size
    overflow = total - size
    return -(-overflow // block) * block  # the next multiple of `block` at or above


def window_length(total: int, *, size: int, block: int, mode: WindowMode) -> int:
    """How many of the newest messages the window holds."""
    return total - window_start(total, size=size, block=block, mode=mode)
