"""R15: the memory cache is invalidated by changes and never refilled with stale data."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from shared.memory.block import MemoryBlock, entry_for
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope


@pytest.fixture
def cache(redis_url: str) -> Iterator[MemoryCache]:
    client = redis.Redis.from_url(redis_url)
    yield MemoryCache(client)
    client.close()


def _block(title: str) -> MemoryBlock:
    entry = entry_for(topic_id=uuid.uuid4(), title=title, summary="s", deprecated=False)
    return MemoryBlock(entries=(entry,), tokens=entry.tokens, dropped=0)


def _scope() -> Scope:
    return Scope(org_id=uuid.uuid4(), agent_id="agent", user_id="user")


def test_r15_a_stored_block_is_served_until_invalidated(cache: MemoryCache) -> None:
    scope = _scope()
    assert cache.get(scope) is None
    assert cache.store(scope, cache.generation(scope), _block("fresh"))
    assert cache.get(scope) == _block_like(cache, scope, "fresh")
    cache.invalidate(scope)
    assert cache.get(scope) is None


def _block_like(cache: MemoryCache, scope: Scope, title: str) -> MemoryBlock:
    block = cache.get(scope)
    assert block is not None and block.entries[0].title == title
    return block


def test_r15_a_reader_that_read_before_the_change_cannot_store_stale_memory(
    cache: MemoryCache,
) -> None:
    """The interleaving, step by step: read generation, read DB, change + invalidate, store."""
    scope = _scope()
    generation = cache.generation(scope)  # reader: before its database read
    stale = _block("before the demotion")  # reader: what the database said then
    cache.invalidate(scope)  # writer: the demotion committed, invalidation ran
    assert cache.store(scope, generation, stale) is False  # reader: too late
    assert cache.get(scope) is None  # the next reader rebuilds from the database


def test_r15_a_reader_after_the_invalidation_may_fill_the_cache(cache: MemoryCache) -> None:
    scope = _scope()
    cache.invalidate(scope)
    generation = cache.generation(scope)
    assert cache.store(scope, generation, _block("after"))
    _block_like(cache, scope, "after")


def test_scopes_do_not_share_cache_entries(cache: MemoryCache) -> None:
    one, two = _scope(), _scope()
    cache.store(one, cache.generation(one), _block("one"))
    assert cache.get(two) is None
    cache.invalidate(two)
    _block_like(cache, one, "one")


def test_the_keys_of_a_scope_share_a_cluster_hash_tag() -> None:
    scope = Scope(org_id=uuid.UUID(int=1), agent_id="a", user_id="u")
    generation_key, block_key = MemoryCache._keys(scope)
    tag = scope.cache_tag
    assert tag in generation_key and tag in block_key
    # Redis Cluster hashes only what lies between the first `{` and the next `}`.
    assert generation_key.index("{") == generation_key.index(tag)
