"""When the server ends a live event stream: idle for idle_s, or max_s after it began."""

from __future__ import annotations

from shared.infra.live_streams import StreamTimer


def _timer() -> StreamTimer:
    return StreamTimer.start(100.0, idle_s=10, max_s=60)


def test_a_stream_without_events_ends_idle() -> None:
    timer = _timer()
    assert timer.ended(109.9) is None
    assert timer.deadline() == 110.0
    assert timer.ended(110.0) == "idle"


def test_an_event_restarts_the_idle_clock_but_not_the_lifetime() -> None:
    timer = _timer()
    for now in range(105, 160, 5):  # an event every 5 s: never idle
        timer.event(float(now))
        assert timer.ended(float(now) + 4.9) is None
    assert timer.deadline() == 160.0
    assert timer.ended(160.0) == "lifetime"


def test_the_lifetime_is_named_when_both_have_passed() -> None:
    assert _timer().ended(500.0) == "lifetime"
