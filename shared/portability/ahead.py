"""Reading an import's next lines while the previous ones are written.

An import alternates two halves of about equal cost: parsing and validating lines (pure
Python) and writing them (PostgreSQL, on the other CPU). psycopg2 releases the GIL while
it waits for a statement, so a second thread that parses ahead overlaps the two halves
instead of adding them. The lines still reach the importer one by one and in order, and
an error of the reader (a bad line, a body too large) is raised where its line would
have come, so what the importer sees is the same as without the thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import TypeVar

T = TypeVar("T")

# Items handed over at once: a queue operation per item would cost as much as a parse.
CHUNK = 500
# Chunks read ahead: more than a batch of messages (restore.MESSAGE_BATCH), so the reader
# keeps going through the whole of a batch's write; and a bound on what waits in memory.
CHUNKS_AHEAD = 24
# How often a reader blocked on a full queue looks whether the importer has gone.
_POLL_S = 0.1


class _Failed:
    """The reader's error, in the place of the items it could not read."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


def read_ahead(
    items: Iterator[T], *, chunk: int = CHUNK, ahead: int = CHUNKS_AHEAD
) -> Generator[T, None, None]:
    """`items`, in order, read by a thread of their own up to `ahead` chunks in advance."""
    handover: queue.Queue[list[T] | _Failed | object] = queue.Queue(maxsize=ahead)
    stopped = threading.Event()

    def hand(what: list[T] | _Failed | object) -> bool:
        """Queue `what`; False when the importer stopped listening (nothing to do then)."""
        while not stopped.is_set():
            try:
                handover.put(what, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        batch: list[T] = []
        try:
            for item in items:
                if stopped.is_set():  # the importer has gone: read no further line
                    return
                batch.append(item)
                if len(batch) >= chunk:
                    if not hand(batch):
                        return
                    batch = []
        except BaseException as error:  # handed over, to be raised on the importer's side
            if hand(batch):
                hand(_Failed(error))
            return
        if hand(batch):
            hand(_END)

    reader = threading.Thread(target=read, name="import-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            got = handover.get()
            if got is _END:
                return
            if isinstance(got, _Failed):
                raise got.error
            yield from got  # type: ignore[misc]  # a list[T]: the only other thing queued
    finally:
        # The importer finished or gave up (close() this generator: an error, a rolled-back
        # session): the reader stops after the line it is reading, and nobody reads the
        # source once this returns.
        stopped.set()
        reader.join()
