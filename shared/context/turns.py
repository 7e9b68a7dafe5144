"""A turn: the agent's messages appended to the active topic and, when it asks, the context
for its next call read in the same transaction (one round trip per turn).

It lives with the context, not the sessions: assembling imports the sessions, so the
sessions may not import it back.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from shared.context.service import ContextOptions, assemble_context
from shared.context.stack import ContextStack
from shared.infra.db.uow import UnitOfWork
from shared.sessions.posting import NewMessage, PostedMessages, post_messages


@dataclass(frozen=True)
class Turn:
    """What the post stored, and the stack for the next call if it was asked for."""

    posted: PostedMessages
    context: ContextStack | None


def post_turn(
    *,
    uow: UnitOfWork,
    client: redis.Redis,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    messages: Sequence[NewMessage],
    drift_interval: int,
    context_options: ContextOptions | None,
) -> Turn:
    """Append `messages` (R26); with `context_options`, the context as it stands after them."""
    if context_options is None:  # a context that fails to build must roll the post back
        uow.one_statement()
    posted = post_messages(
        uow=uow,
        org_id=org_id,
        session_id=session_id,
        messages=messages,
        drift_interval=drift_interval,
    )
    if context_options is None:
        return Turn(posted=posted, context=None)
    # Read in this transaction: it holds what was just stored.
    stack = assemble_context(
        uow=uow, client=client, org_id=org_id, session_id=session_id, options=context_options
    )
    return Turn(posted=posted, context=stack)
