"""The thread window (R2): never over the cap; the block window's start moves in steps."""

from __future__ import annotations

import itertools

import pytest

from shared.context.window import window_length, window_start


@pytest.mark.parametrize("mode", ["block", "sliding"])
@pytest.mark.parametrize("total", range(0, 120))
def test_r2_the_window_never_exceeds_its_size(mode: str, total: int) -> None:
    length = window_length(total, size=20, block=10, mode=mode)  # type: ignore[arg-type]
    assert length == min(total, 20) if mode == "sliding" else 0 <= length <= 20
    if total >= 20 and mode == "block":
        assert length >= 11  # between size - block + 1 and size messages


def test_r2_the_block_window_start_moves_only_by_whole_blocks() -> None:
    starts = [window_start(n, size=20, block=10, mode="block") for n in range(0, 61)]
    assert starts[:21] == [0] * 21
    assert starts[21:31] == [10] * 10  # message 21 trims 10 at once, then it stays put
    assert starts[31:41] == [20] * 10
    changes = sum(1 for a, b in itertools.pairwise(starts) if a != b)
    assert changes == 4  # 60 messages: four trims, versus a move every turn when sliding


def test_r2_the_sliding_window_moves_every_message() -> None:
    starts = [window_start(n, size=20, block=10, mode="sliding") for n in range(20, 30)]
    assert starts == list(range(0, 10))


def test_a_block_of_one_is_the_sliding_window() -> None:
    for n in range(0, 50):
        assert window_start(n, size=20, block=1, mode="block") == window_start(
            n, size=20, block=1, mode="sliding"
        )
