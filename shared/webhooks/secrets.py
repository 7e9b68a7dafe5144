"""Webhook signing secrets: made, checked, and sealed for the database.

A secret is the Standard Webhooks form, `whsec_` and the base64 of 24 to 64 random
bytes. In the database it is sealed with Fernet (AES-128-CBC + HMAC-SHA256) under
DRIFTLESS_WEBHOOK_KEYS, so a dump or a backup does not reveal it; the first key seals
and every listed key opens, which is how keys rotate. Without keys a secret is stored
as given, marked so, and sealed once keys are configured and it is next written.
A secret is never logged: it lives in a column, a worker's memory during an attempt,
and the one answer that creates it.
"""

from __future__ import annotations

import base64
import binascii
import secrets

from cryptography.fernet import InvalidToken

from shared.domain.errors import Invalid
from shared.infra.sealing import parse_keys

PREFIX = "whsec_"
MIN_BYTES, MAX_BYTES = 24, 64  # the Standard Webhooks range
_SEALED, _PLAIN = "fernet:", "plain:"


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def checked_secret(secret: str) -> str:
    """A client's own secret, if it is one the receiver's standardwebhooks can use."""
    try:
        raw = base64.b64decode(secret.removeprefix(PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if not secret.startswith(PREFIX) or not MIN_BYTES <= len(raw) <= MAX_BYTES:
        raise Invalid(
            f"secret: must be {PREFIX} followed by the base64 of"
            f" {MIN_BYTES} to {MAX_BYTES} random bytes"
        )
    return secret


class SecretBox:
    """Seals secrets for the database and opens them for an attempt."""

    def __init__(self, keys: str | None) -> None:
        self._fernet = parse_keys(keys) if keys else None

    def seal(self, secret: str) -> str:
        if self._fernet is None:
            return _PLAIN + secret
        return _SEALED + self._fernet.encrypt(secret.encode()).decode()

    def open(self, sealed: str) -> str:
        if sealed.startswith(_PLAIN):
            return sealed.removeprefix(_PLAIN)
        if self._fernet is None:
            raise SecretUnavailable("a sealed webhook secret, and DRIFTLESS_WEBHOOK_KEYS is unset")
        try:
            return self._fernet.decrypt(sealed.removeprefix(_SEALED).encode()).decode()
        except InvalidToken:
            raise SecretUnavailable(
                "a webhook secret sealed with a key DRIFTLESS_WEBHOOK_KEYS no longer lists"
            ) from None


class SecretUnavailable(Exception):
    """The secret cannot be opened with the configured keys: a configuration error."""
