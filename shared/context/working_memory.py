"""Working memory (R1): a small JSON document per session, volatile by nature.

It lives in Redis with a TTL, not in PostgreSQL: the agent runtime rewrites it every
turn, and nothing of it is meant to outlive the conversation.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import redis

from shared.domain.limits import MAX_WORKING_MEMORY_BYTES, check_json, check_size
from shared.infra.db.uow import UnitOfWork
from shared.sessions.service import load_session

TTL_S = 24 * 3600


def _key(session_id: uuid.UUID) -> str:
    return f"driftless:working-memory:{{{session_id}}}"


def set_working_memory(
    *,
    uow: UnitOfWork,
    client: redis.Redis,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    document: dict[str, Any],
) -> None:
    """Replace the session's working memory, within the limits (shared/domain/limits.py)."""
    check_json(document, field="workingMemory", limits=uow.limits)
    check_size(document, what="working memory", max_bytes=MAX_WORKING_MEMORY_BYTES)
    session = load_session(uow=uow, org_id=org_id, session_id=session_id)
    put_working_memory(client, session.id, document)


def put_working_memory(
    client: redis.Redis, session_id: uuid.UUID, document: dict[str, Any]
) -> None:
    client.set(_key(session_id), json.dumps(document, sort_keys=True), ex=TTL_S)


def get_working_memory(client: redis.Redis, session_id: uuid.UUID) -> dict[str, Any] | None:
    raw: Any = client.get(_key(session_id))
    if raw is None:
        return None
    document: dict[str, Any] = json.loads(raw)
    return document


def forget_working_memory(client: redis.Redis, session_id: uuid.UUID) -> int:
    return int(client.delete(_key(session_id)))
