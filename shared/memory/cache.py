"""The Redis cache of memory blocks, race-free through a generation counter per scope.

A reader notes the scope's generation *before* it reads PostgreSQL and stores what it
read only if the generation is still the same (one Lua script, so check-and-set is
atomic). An invalidation bumps the generation after the change commits, so a reader
that read the database before the change can never put the stale block back (R15).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis

from shared.memory.block import MemoryBlock
from shared.memory.scope import Scope

# A bound on staleness should an invalidation job ever be lost.
BLOCK_TTL_S = 600
# Long enough to outlive any reader; should it lapse, readers see "0" and the
# comparison still fails for anyone who read another value.
GENERATION_TTL_S = 7 * 24 * 3600

_STORE_IF_CURRENT = """
local generation = redis.call('GET', KEYS[1]) or '0'
if generation ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'EX', tonumber(ARGV[3]))
return 1
"""


def _text(generation: Any) -> str:
    """A generation as stored by INCR (bytes), or "0" when the key does not exist."""
    return generation.decode() if isinstance(generation, bytes) else str(generation or "0")


class MemoryCache:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._store_if_current = client.register_script(_STORE_IF_CURRENT)

    @staticmethod
    def _keys(scope: Scope) -> tuple[str, str]:
        tag = scope.cache_tag
        return f"driftless:memory:{tag}:generation", f"driftless:memory:{tag}:block"

    def generation(self, scope: Scope) -> str:
        """Read before the database; hand back to `store`."""
        return _text(self._redis.get(self._keys(scope)[0]))

    def get(self, scope: Scope) -> MemoryBlock | None:
        generation_key, block_key = self._keys(scope)
        generation, raw = self._redis.mget([generation_key, block_key])
        if raw is None:
            return None
        cached = json.loads(raw)
        if cached["generation"] != _text(generation):
            return None
        return MemoryBlock.from_json(cached["block"])

    def store(self, scope: Scope, generation: str, block: MemoryBlock, version: int = 0) -> bool:
        """Cache `block` if no invalidation happened since `generation` was read.

        `version` is the scope's memory version in PostgreSQL read before the block was:
        the reconciler compares it to spot a block whose invalidation job was lost.
        """
        value = json.dumps({"generation": generation, "block": block.to_json(), "version": version})
        stored = self._store_if_current(
            keys=list(self._keys(scope)), args=[generation, value, BLOCK_TTL_S]
        )
        return bool(stored)

    def cached_versions(self, scopes: Sequence[Scope]) -> list[int | None]:
        """The memory version each scope's cached block was built from; None if none is
        cached. One round trip; not MGET, whose keys must share a Cluster slot."""
        with self._redis.pipeline(transaction=False) as pipe:
            for scope in scopes:
                pipe.get(self._keys(scope)[1])
            raws = pipe.execute()
        # A block cached before versions existed counts as older than any version.
        return [None if raw is None else int(json.loads(raw).get("version", -1)) for raw in raws]

    def forget(self, scope: Scope) -> int:
        """Delete the scope's keys, generation included (user erasure): afterwards no key
        of this scope exists. Unlike `invalidate`, this leaves no generation behind, so
        a reader that read PostgreSQL before the erasure committed could still cache
        what it read, for at most BLOCK_TTL_S; the erasure commits first, so any reader
        that starts after it finds nothing to cache."""
        return int(self._redis.delete(*self._keys(scope)))

    def invalidate(self, scope: Scope) -> None:
        generation_key, block_key = self._keys(scope)
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(generation_key)
            pipe.expire(generation_key, GENERATION_TTL_S)
            pipe.delete(block_key)
            pipe.execute()
