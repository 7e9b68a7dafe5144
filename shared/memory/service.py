"""Reading a scope's memory block: from the cache, or rebuilt from PostgreSQL."""

from __future__ import annotations

import logging

import redis
from sqlalchemy import or_, select

from shared.infra.db.uow import UnitOfWork
from shared.memory.block import MemoryBlock, entry_for, fit_to_budget
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.memory.versions import memory_version
from shared.sessions.models import ChatSession
from shared.topics.models import Topic

log = logging.getLogger(__name__)

# Entries are at least a few tokens each, so no budget fits more than this many.
MAX_ENTRIES_READ = 2000


def load_memory_block(*, uow: UnitOfWork, scope: Scope, budget: int) -> MemoryBlock:
    """Promoted and deprecated topics of the scope, oldest first, within `budget` (R16)."""
    newest_first = uow.session.execute(
        select(Topic.id, Topic.title, Topic.summary, Topic.deprecated)
        .join(ChatSession, ChatSession.id == Topic.session_id)
        .where(
            ChatSession.org_id == scope.org_id,
            ChatSession.agent_id == scope.agent_id,
            ChatSession.user_id == scope.user_id,
            or_(Topic.keep_in_memory, Topic.deprecated),
        )
        .order_by(Topic.created_at.desc(), Topic.id.desc())
        .limit(MAX_ENTRIES_READ)
    ).all()
    entries = [
        entry_for(topic_id=row.id, title=row.title, summary=row.summary, deprecated=row.deprecated)
        for row in reversed(newest_first)
    ]
    return fit_to_budget(entries, budget)


def memory_block(*, uow: UnitOfWork, cache: MemoryCache, scope: Scope, budget: int) -> MemoryBlock:
    """The scope's memory: a cache hit, or a rebuild that refills the cache race-free."""
    try:
        cached = cache.get(scope)
        if cached is not None:
            return cached
        generation = cache.generation(scope)
    except redis.RedisError:
        log.warning("memory cache unavailable; reading PostgreSQL", exc_info=True)
        return load_memory_block(uow=uow, scope=scope, budget=budget)
    # Read before the topics (each statement has its own snapshot): the block is then at
    # least as new as the version it is stored with, never older.
    version = memory_version(uow=uow, scope=scope)
    block = load_memory_block(uow=uow, scope=scope, budget=budget)
    try:
        cache.store(scope, generation, block, version)
    except redis.RedisError:
        log.warning("could not refill the memory cache", exc_info=True)
    return block
