"""shared/portability/ahead.py: lines read on a second thread reach the importer as if
read on its own, in order, errors in their place, and the reader stops with it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from shared.portability.ahead import read_ahead


def test_every_item_arrives_once_and_in_order_across_chunks() -> None:
    assert list(read_ahead(iter(range(1_003)), chunk=10, ahead=2)) == list(range(1_003))
    assert list(read_ahead(iter([]), chunk=10, ahead=2)) == []


def test_an_error_is_raised_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield from range(25)
        raise ValueError("line 26 is bad")

    got: list[int] = []
    with pytest.raises(ValueError, match="line 26 is bad"):
        for item in read_ahead(items(), chunk=10, ahead=2):
            got.append(item)
    assert got == list(range(25))


def test_an_importer_that_gives_up_stops_the_reader_and_its_reading() -> None:
    read: list[int] = []

    def items() -> Iterator[int]:
        for n in range(1_000_000):
            read.append(n)
            yield n

    lines = read_ahead(items(), chunk=10, ahead=2)
    assert next(lines) == 0
    lines.close()  # as the importer does on an error: nothing reads the source after this
    stopped_at = len(read)
    assert not any(t.name == "import-read-ahead" for t in threading.enumerate())
    assert stopped_at < 100 and len(read) == stopped_at
