"""Fernet keys from configuration: what seals stored secrets (webhook signing secrets).

Kept apart from shared/webhooks/ so that settings can check DRIFTLESS_WEBHOOK_KEYS at
start without importing the feature that uses them.
"""

from __future__ import annotations

import binascii

from cryptography.fernet import Fernet, MultiFernet


def parse_keys(keys: str) -> MultiFernet:
    """Comma-separated Fernet keys (`Fernet.generate_key()`): the first seals, all open."""
    try:
        return MultiFernet([Fernet(key.strip()) for key in keys.split(",") if key.strip()])
    except (ValueError, binascii.Error):
        raise ValueError("each key must be 32 url-safe base64-encoded bytes (Fernet)") from None
