"""The pump's arithmetic (shared/reevaluations/pump.py `owed`): a campaign gets its rate
times the time passed, a slow rate adds up across ticks, and a pause is not made up at once."""

from __future__ import annotations

import pytest

from shared.reevaluations.pump import BURST_S, MAX_PER_TICK, TICK_S, owed


@pytest.mark.parametrize(
    ("rate", "elapsed_s", "expected"),
    [
        (5.0, 1.0, 5),
        (5.0, 0.5, 2),  # 2.5 owed: 2 now, the half carried over
        (5.0, 0.0, 0),
        (5.0, -3.0, 0),  # a clock that went back owes nothing
        (1000.0, 1.0, 1000),
        (0.1, 1.0, 0),
    ],
)
def test_a_tick_enqueues_the_rate_times_the_time_passed(
    rate: float, elapsed_s: float, expected: int
) -> None:
    assert owed(rate=rate, elapsed_s=elapsed_s)[0] == expected


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 2.5, 7.0, 333.3])
def test_over_many_ticks_the_rate_holds_fractions_included(rate: float) -> None:
    """What the pump does with the leftover (advanced_at = now - leftover) over 100 s."""
    clock, advanced_at, sent = 0.0, 0.0, 0
    for _ in range(int(100 / TICK_S)):
        clock += TICK_S
        count, leftover_s = owed(rate=rate, elapsed_s=clock - advanced_at)
        if count:
            sent += count
            advanced_at = clock - leftover_s
    assert abs(sent - rate * 100) <= 1


def test_after_a_pause_only_a_burst_is_made_up() -> None:
    assert owed(rate=5.0, elapsed_s=3600.0)[0] == 5 * BURST_S + 1
    # ...and a slow campaign still gets its topic, never a burst of zero.
    assert owed(rate=0.1, elapsed_s=3600.0)[0] == 1


def test_a_tick_never_passes_its_limit() -> None:
    assert owed(rate=1000.0, elapsed_s=60.0)[0] == MAX_PER_TICK
    assert owed(rate=1000.0, elapsed_s=60.0, limit=7)[0] == 7
