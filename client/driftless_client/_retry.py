"""When to try a request again, and after how long: no I/O here, both clients share it.

429 and 503 are retried, whatever the method: the server wrote nothing for either
(a limit, or a dependency down). The wait is the answer's `Retry-After` when it has
one (capped), else an exponential backoff with full jitter. A transport failure
(timeout, connection reset) is retried only for idempotent methods: a POST whose
connection broke may have been applied, and posting it again would store it twice.
"""

from __future__ import annotations

import email.utils
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

RETRIED_STATUSES = frozenset({429, 503})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# Transport failures worth another try; others (a bad URL, a proxy refusing) are not.
_TRANSIENT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


@dataclass(frozen=True)
class RetryPolicy:
    """`max_retries` more attempts after the first; waits of `backoff_s`, doubling, with
    full jitter (a random wait up to that), at most `max_backoff_s`; a `Retry-After` is
    honoured up to `max_retry_after_s`."""

    max_retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_retry_after_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        if self.backoff_s < 0 or self.max_backoff_s < 0 or self.max_retry_after_s < 0:
            raise ValueError("waits must be 0 or more")

    def after_response(self, attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before trying again after this answer to attempt `attempt`
        (0 is the first), or None: the answer is final."""
        if response.status_code not in RETRIED_STATUSES or attempt >= self.max_retries:
            return None
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s)
        return self.backoff(attempt)

    def after_error(self, attempt: int, method: str, error: httpx.TransportError) -> float | None:
        """Seconds to wait before trying again after `error`, or None: raise it."""
        if attempt >= self.max_retries or method.upper() not in IDEMPOTENT_METHODS:
            return None
        if not isinstance(error, _TRANSIENT_ERRORS):
            return None
        return self.backoff(attempt)

    def backoff(self, attempt: int) -> float:
        """Full jitter: anything from 0 to `backoff_s * 2**attempt` (capped)."""
        ceiling = min(self.max_backoff_s, self.backoff_s * 2.0 ** min(attempt, 64))
        return random.uniform(0.0, ceiling)


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds: a number of seconds or an HTTP date; None if unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
