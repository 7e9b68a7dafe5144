"""Stored secrets (webhook signing secrets, orgs' model API keys), sealed for the database.

A secret is sealed with Fernet (AES-128-CBC + HMAC-SHA256) under DRIFTLESS_SECRET_KEYS,
so a dump or a backup does not reveal it; the first key seals and every listed key
opens, which is how keys rotate (`driftless secrets reseal` moves every row to the
first key). Without keys nothing is sealed, so nothing is stored: `seal` refuses. Rows
stored as given (`plain:`) before that rule still open, and reseal seals them. Kept
apart from the features that store secrets, so that settings can check the keys at
start without importing them.
"""

from __future__ import annotations

import binascii
import contextlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from shared.domain.errors import SealingKeyMissing

VARIABLE = "DRIFTLESS_SECRET_KEYS"
# Read while operators move to the new name: DRIFTLESS_SECRET_KEYS wins when both are set.
DEPRECATED_VARIABLE = "DRIFTLESS_WEBHOOK_KEYS"
# The `info` key that marks a column holding sealed secrets: `mapped_column(Text,
# info={SEALED: True})`. `driftless secrets reseal` re-seals every column so marked.
SEALED = "sealed"


def _fernets(keys: str) -> list[Fernet]:
    try:
        fernets = [Fernet(key.strip()) for key in keys.split(",") if key.strip()]
    except (ValueError, binascii.Error):
        raise ValueError("each key must be 32 url-safe base64-encoded bytes (Fernet)") from None
    if not fernets:
        raise ValueError("name at least one key")
    return fernets


def parse_keys(keys: str) -> MultiFernet:
    """Comma-separated Fernet keys (`Fernet.generate_key()`): the first seals, all open."""
    return MultiFernet(_fernets(keys))


# A row stored as given before [4.1] (no keys then) carries PLAIN; reseal seals it.
_SEALED, PLAIN = "fernet:", "plain:"
UNLISTED = f"a secret sealed with a key {VARIABLE} no longer lists"


class SecretBox:
    """Seals secrets for the database and opens them where they are used."""

    def __init__(self, keys: str | None) -> None:
        fernets = _fernets(keys) if keys else []
        # The newest key alone (it seals), and all of them (they open).
        self._keys = (fernets[0], MultiFernet(fernets)) if fernets else None

    def _require_keys(self) -> tuple[Fernet, MultiFernet]:
        if self._keys is None:
            raise SealingKeyMissing(
                f"this server stores no secrets: it has no key to seal them with ({VARIABLE}"
                " is unset); its operator must set it"
            )
        return self._keys

    def require_keys(self) -> None:
        """SealingKeyMissing without keys: nothing is stored unsealed."""
        self._require_keys()

    def seal(self, secret: str) -> str:
        """The secret sealed under the newest key; refused without keys (SealingKeyMissing)."""
        _, every = self._require_keys()
        return _SEALED + every.encrypt(secret.encode()).decode()

    def open(self, sealed: str) -> str:
        if sealed.startswith(PLAIN):
            return sealed.removeprefix(PLAIN)
        if self._keys is None:
            raise SecretUnavailable(f"a sealed secret, and {VARIABLE} is unset")
        try:
            return self._keys[1].decrypt(sealed.removeprefix(_SEALED).encode()).decode()
        except InvalidToken:
            raise SecretUnavailable(UNLISTED) from None

    def resealed(self, sealed: str) -> str | None:
        """`sealed` under the newest key, or None when it already is (a second reseal
        changes nothing). Raises SecretUnavailable when no listed key opens it."""
        newest, every = self._require_keys()
        if sealed.startswith(PLAIN):
            return self.seal(sealed.removeprefix(PLAIN))
        token = sealed.removeprefix(_SEALED).encode()
        with contextlib.suppress(InvalidToken):
            newest.decrypt(token)
            return None
        try:
            return _SEALED + every.rotate(token).decode()
        except InvalidToken:
            raise SecretUnavailable(UNLISTED) from None


class SecretUnavailable(Exception):
    """The secret cannot be opened with the configured keys: a configuration error."""
