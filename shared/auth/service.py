"""Creating, listing and revoking API keys, and resolving a presented key to its org."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert

from shared.auth.models import ApiKey, Org
from shared.domain.errors import Conflict, Invalid, NotFound
from shared.infra.db.uow import UnitOfWork

KEY_PREFIX = "dl_"
ORG_NAME_MAX = 200  # orgs.name's column


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(*, uow: UnitOfWork, org_name: str) -> str:
    """Create the org if needed and a new key for it; returns the key (shown once)."""
    org_id = ensure_org(uow=uow, org_name=org_name)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    uow.session.add(ApiKey(org_id=org_id, key_hash=hash_key(key), prefix=key[:10]))
    return key


def ensure_org(*, uow: UnitOfWork, org_name: str) -> uuid.UUID:
    """The id of the org called `org_name`, created if there is none."""
    if not org_name.strip() or len(org_name) > ORG_NAME_MAX:
        raise Invalid(f"an org's name is 1 to {ORG_NAME_MAX} characters, not all blank")
    # ON CONFLICT: two commands creating the same org at once both get it, neither fails.
    uow.session.execute(
        insert(Org).values(name=org_name).on_conflict_do_nothing(index_elements=[Org.name])
    )
    return org_id_named(uow=uow, org_name=org_name)


def org_for_key(*, uow: UnitOfWork, key: str) -> uuid.UUID | None:
    """The org a live key belongs to, or None for an unknown or revoked key."""
    return uow.session.scalar(
        select(ApiKey.org_id).where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))
    )


@dataclass(frozen=True)
class KeyInfo:
    """What may be shown of a key: never the key, never its hash."""

    prefix: str
    org_name: str
    created_at: datetime
    revoked_at: datetime | None


def _info(key: ApiKey, org_name: str) -> KeyInfo:
    return KeyInfo(
        prefix=key.prefix, org_name=org_name, created_at=key.created_at, revoked_at=key.revoked_at
    )


def org_id_named(*, uow: UnitOfWork, org_name: str) -> uuid.UUID:
    """The id of the org called `org_name` (operators name orgs; the API never does)."""
    org_id = uow.session.scalar(select(Org.id).where(Org.name == org_name))
    if org_id is None:
        raise NotFound(f"no org named {org_name!r}")
    return org_id


def list_keys(*, uow: UnitOfWork, org_name: str) -> list[KeyInfo]:
    """The org's keys, oldest first, revoked ones included."""
    org_id = org_id_named(uow=uow, org_name=org_name)
    keys = uow.session.scalars(
        select(ApiKey).where(ApiKey.org_id == org_id).order_by(ApiKey.created_at, ApiKey.prefix)
    )
    return [_info(key, org_name) for key in keys]


def revoke_key(*, uow: UnitOfWork, prefix: str) -> KeyInfo:
    """Revoke the one key whose prefix starts with `prefix`; revoking it again changes nothing."""
    if not prefix.strip():
        raise Invalid("a key prefix is required (`driftless keys list ORG` shows them)")
    # autoescape: "_" (in every key's "dl_") and "%" are LIKE wildcards otherwise.
    matches = uow.session.execute(
        select(ApiKey, Org.name)
        .join(Org, Org.id == ApiKey.org_id)
        .where(ApiKey.prefix.startswith(prefix, autoescape=True))
        .with_for_update(of=ApiKey)
    ).all()
    if not matches:
        raise NotFound(f"no API key has the prefix {prefix!r}")
    if len(matches) > 1:
        raise Conflict(
            f"the prefix {prefix!r} matches {len(matches)} keys; revoking none "
            "(give the whole prefix `driftless keys list ORG` shows)"
        )
    key, org_name = matches[0]
    if key.revoked_at is None:  # the first revocation's time stands
        key.revoked_at = uow.session.scalar(select(func.now()))
        uow.session.flush()
    return _info(key, org_name)


@dataclass(frozen=True)
class Caller:
    """A live key's org and the org's request limit overrides (None: the fleet's default)."""

    org_id: uuid.UUID
    requests_per_s: float | None = None
    request_burst: int | None = None


def caller_for_key(*, uow: UnitOfWork, key: str) -> Caller | None:
    """The org of a live key with its limits, or None for an unknown or revoked key."""
    row = uow.session.execute(
        select(ApiKey.org_id, Org.requests_per_s, Org.request_burst)
        .join(Org, Org.id == ApiKey.org_id)
        .where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))
    ).first()
    return None if row is None else Caller(*row)
