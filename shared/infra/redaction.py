"""Secrets kept out of what an upstream server says: a provider that echoes the key it
was called with (some 401 bodies quote it) must not put it in a log line or a stored
error. Every upstream error text that is kept goes through `redact` first."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

REDACTED = "[redacted]"
# A shorter value (a test's one-letter key) is no secret worth replacing every one of its
# occurrences in the text with REDACTED, which would leave the text unreadable.
MIN_SECRET_CHARS = 4
# Request headers that carry a credential, as OpenAI-compatible clients send one.
CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key")


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every occurrence of each secret replaced by REDACTED."""
    for secret in sorted(
        {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True
    ):
        text = text.replace(secret, REDACTED)
    return text


def credentials_of(request: object) -> list[str]:
    """The credentials a failed request carried (an `httpx` request, or None): the
    Authorization header's token and the key headers' values."""
    headers = getattr(request, "headers", None)
    if not isinstance(headers, Mapping):
        return []
    found = []
    for name in CREDENTIAL_HEADERS:
        value = headers.get(name)
        if isinstance(value, str) and value:
            found += [value, value.partition(" ")[2]] if name == "authorization" else [value]
    return found
