"""shared/infra/heap.py: startup objects are frozen out of the collector's full collections."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from shared.infra.heap import freeze_startup_objects


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # this test process keeps collecting everything, as before


def test_objects_alive_at_startup_are_frozen_and_garbage_is_not(unfrozen: None) -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector can free it

    kept = [Node() for _ in range(1000)]
    garbage = [weakref.ref(Node()) for _ in range(1000)]

    frozen = freeze_startup_objects()

    assert frozen >= len(kept)
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(node) in tracked for node in kept)  # no generation walks them again
    assert all(ref() is None for ref in garbage)  # collected first, not frozen for good


def test_a_worker_freezes_only_as_a_command_line_worker() -> None:
    """Not a worker that a test process runs in a thread (tests/worker_thread.py)."""
    from worker.context import freeze_worker_startup_objects

    before = gc.get_freeze_count()
    freeze_worker_startup_objects(sender=object())
    assert gc.get_freeze_count() == before
