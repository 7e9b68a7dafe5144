"""The per-org circuit breaker (shared/providers/breaker.py), on a hand-moved clock."""

from __future__ import annotations

from shared.providers.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_five_failures_in_a_row_open_it_for_thirty_seconds() -> None:
    clock = Clock()
    breaker = Breaker(clock=clock)

    opened = [breaker.failed("a") for _ in range(5)]

    assert opened == [False, False, False, False, True]  # one log line, at the opening
    assert not breaker.allows("a")
    clock.now += 29.9
    assert not breaker.allows("a")
    clock.now += 0.2
    assert breaker.allows("a")  # the one trial


def test_a_success_between_failures_starts_the_count_again() -> None:
    breaker = Breaker(clock=Clock())
    for _ in range(4):
        breaker.failed("a")
    breaker.succeeded("a")
    for _ in range(4):
        breaker.failed("a")

    assert breaker.allows("a")


def test_one_keys_failures_never_close_anothers_calls() -> None:
    breaker = Breaker(clock=Clock())
    for _ in range(10):
        breaker.failed("a")

    assert not breaker.allows("a")
    assert breaker.allows("b")


def test_after_the_cooldown_one_trial_goes_and_the_others_wait_for_its_answer() -> None:
    clock = Clock()
    breaker = Breaker(threshold=2, cooldown_s=30, clock=clock)
    breaker.failed("a")
    breaker.failed("a")
    clock.now += 30

    assert breaker.allows("a")  # the trial
    assert not breaker.allows("a")  # the others, while it runs
    breaker.failed("a")  # it failed: another cooldown, no second log line
    clock.now += 29
    assert not breaker.allows("a")
    clock.now += 1
    assert breaker.allows("a")
    breaker.succeeded("a")  # it answered: closed
    assert breaker.allows("a") and breaker.allows("a")


def test_a_forgotten_key_starts_closed() -> None:
    breaker = Breaker(threshold=1, clock=Clock())
    breaker.failed("a")
    breaker.forget("a")  # the org set another server or key

    assert breaker.allows("a")
