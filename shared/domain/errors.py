"""Domain errors. The web app maps each to one HTTP status in a single handler."""


class DomainError(Exception):
    """Base of every error a client can cause."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(DomainError):
    """The resource does not exist, or belongs to another org (indistinguishable on purpose)."""

    code = "not_found"


class Conflict(DomainError):
    """The request contradicts the current state."""

    code = "conflict"


class Invalid(DomainError):
    """A well-formed request whose values the domain rejects."""

    code = "validation_error"


class TooLarge(DomainError):
    """What the request would store passes a size limit (shared/domain/limits.py)."""

    code = "too_large"


class Unavailable(DomainError):
    """A dependency (database, Redis, broker) is down."""

    code = "unavailable"


class TooBusy(DomainError):
    """A per-org limit is full for now: the same request may succeed `retry_after_s` later."""

    code = "too_busy"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SealingKeyMissing(Conflict):
    """A secret (a webhook's, an org's model key) cannot be stored: the server has no key
    to seal it with. 409, not 503: clients retry a 503, and this one passes only when the
    operator sets DRIFTLESS_SECRET_KEYS; not 422 either, the request itself is fine."""

    code = "sealing_key_missing"
