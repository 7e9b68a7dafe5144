"""Stored secrets (webhook signing secrets, orgs' model API keys), sealed for the database.

A secret is sealed with Fernet (AES-128-CBC + HMAC-SHA256) under DRIFTLESS_WEBHOOK_KEYS,
so a dump or a backup does not reveal it; the first key seals and every listed key
opens, which is how keys rotate. Without keys a secret is stored as given, marked so,
and sealed once keys are configured and it is next written. Kept apart from the features
that store secrets, so that settings can check the keys at start without importing them.
"""

from __future__ import annotations

import binascii

from cryptography.fernet import Fernet, InvalidToken, MultiFernet


def parse_keys(keys: str) -> MultiFernet:
    """Comma-separated Fernet keys (`Fernet.generate_key()`): the first seals, all open."""
    try:
        return MultiFernet([Fernet(key.strip()) for key in keys.split(",") if key.strip()])
    except (ValueError, binascii.Error):
        raise ValueError("each key must be 32 url-safe base64-encoded bytes (Fernet)") from None


_SEALED, _PLAIN = "fernet:", "plain:"


class SecretBox:
    """Seals secrets for the database and opens them where they are used."""

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
            raise SecretUnavailable("a sealed secret, and DRIFTLESS_WEBHOOK_KEYS is unset")
        try:
            return self._fernet.decrypt(sealed.removeprefix(_SEALED).encode()).decode()
        except InvalidToken:
            raise SecretUnavailable(
                "a secret sealed with a key DRIFTLESS_WEBHOOK_KEYS no longer lists"
            ) from None


class SecretUnavailable(Exception):
    """The secret cannot be opened with the configured keys: a configuration error."""
