"""Creating API keys and resolving a presented key to its org."""

from __future__ import annotations

import hashlib
import secrets
import uuid

from sqlalchemy import select

from shared.auth.models import ApiKey, Org
from shared.db.uow import UnitOfWork

KEY_PREFIX = "dl_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(*, uow: UnitOfWork, org_name: str) -> str:
    """Create the org if needed and a new key for it; returns the key (shown once)."""
    org = uow.session.scalar(select(Org).where(Org.name == org_name))
    if org is None:
        org = Org(name=org_name)
        uow.session.add(org)
        uow.session.flush()
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    uow.session.add(ApiKey(org_id=org.id, key_hash=hash_key(key), prefix=key[:10]))
    return key


def org_for_key(*, uow: UnitOfWork, key: str) -> uuid.UUID | None:
    """The org a live key belongs to, or None for an unknown or revoked key."""
    return uow.session.scalar(
        select(ApiKey.org_id).where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))
    )
