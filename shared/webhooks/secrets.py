"""Webhook signing secrets: made, checked, and sealed for the database.

A secret is the Standard Webhooks form, `whsec_` and the base64 of 24 to 64 random
bytes. In the database it is sealed (shared/infra/sealing.py's `SecretBox`), so a dump
or a backup does not reveal it.
A secret is never logged: it lives in a column, a worker's memory during an attempt,
and the one answer that creates it.
"""

from __future__ import annotations

import base64
import binascii
import secrets

from shared.domain.errors import Invalid

PREFIX = "whsec_"
MIN_BYTES, MAX_BYTES = 24, 64  # the Standard Webhooks range


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
