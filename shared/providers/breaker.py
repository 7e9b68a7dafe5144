"""A circuit breaker per org: a failing model server costs its own org, and little.

An org's server that answers 401 or times out would otherwise hold a worker slot for the
full timeout and retries of every one of the org's calls, and the other orgs' calls wait
behind them. After `threshold` consecutive failures the org's calls fail at once (R14:
each gets the fallback summary, never promoted) for `cooldown_s`; then one call is let
through to try, and its answer closes the breaker or opens it again. Per process: each
worker learns for itself, which costs at most `threshold` calls a process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

THRESHOLD = 5
COOLDOWN_S = 30.0


@dataclass
class _State:
    failures: int = 0
    open_until: float = 0.0


class Breaker:
    """Consecutive failures per key; `allows` says whether a call may be made now."""

    def __init__(
        self,
        *,
        threshold: int = THRESHOLD,
        cooldown_s: float = COOLDOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._states: dict[Hashable, _State] = {}
        self._lock = threading.Lock()

    def allows(self, key: Hashable) -> bool:
        """Closed, or open past its cooldown: then this call is the one trial, and the
        others wait another cooldown for its answer."""
        with self._lock:
            state = self._states.get(key)
            if state is None or state.failures < self.threshold:
                return True
            now = self._clock()
            if now < state.open_until:
                return False
            state.open_until = now + self.cooldown_s
            return True

    def succeeded(self, key: Hashable) -> None:
        with self._lock:
            self._states.pop(key, None)

    def failed(self, key: Hashable) -> bool:
        """Count a failure; True when it opens the breaker (for one log line, not one a call)."""
        with self._lock:
            state = self._states.setdefault(key, _State())
            state.failures += 1
            if state.failures < self.threshold:
                return False
            state.open_until = self._clock() + self.cooldown_s
            return state.failures == self.threshold

    def forget(self, key: Hashable) -> None:
        """A new configuration (the org set another server or key) starts closed."""
        self.succeeded(key)
