"""Live updates: workers publish what changed in a session; the console listens (SSE).

Redis pub/sub is fire-and-forget on purpose: a missed event only delays a screen
refresh, and the console re-reads everything it shows from the API.
"""

from __future__ import annotations

import json
import logging
import uuid

import redis

log = logging.getLogger(__name__)


def channel(session_id: uuid.UUID | str) -> str:
    return f"driftless:live:{{{session_id}}}"


def publish(client: redis.Redis, session_id: uuid.UUID | str, kind: str, topic_id: object) -> None:
    """Tell listeners of the session that `kind` happened to `topic_id` (best effort)."""
    event = json.dumps({"type": kind, "topicId": str(topic_id)})
    try:
        client.publish(channel(session_id), event)
    except redis.RedisError:
        log.warning("could not publish a live %s event for session %s", kind, session_id)
