"""The registry a multi-process exporter serves: the sum of every process's metric files.

Both exporters use it: the web's `/metrics` under gunicorn and the worker's metrics port.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

# A metric file starts with a 4-byte "bytes used" count and 4 bytes of padding.
_HEADER_BYTES = 8

# prometheus-client's summing of metric files, which it leaves untyped.
_merge: Callable[..., Iterable[Metric]] = MultiProcessCollector.merge


class SettledFilesCollector(Collector):
    """prometheus-client's MultiProcessCollector, minus files a process is still creating.

    prometheus-client creates a process's metric file empty and sizes it a moment later.
    A scrape in between raised `struct.error` for the whole registry, so the exporter
    answered 500 (prometheus/client_python#1199, open upstream). A file that short holds
    no sample yet, so leaving it out loses nothing. A process killed in that moment leaves
    the file empty for good, and without this every later scrape would fail too.
    """

    def __init__(self, path: str) -> None:
        self._path = path

    def collect(self) -> Iterable[Metric]:
        files = glob.glob(os.path.join(self._path, "*.db"))
        return _merge([path for path in files if _has_header(path)], accumulate=True)


def _has_header(path: str) -> bool:
    try:
        # Files only grow (truncate up, then mmap), so a header seen now stays readable.
        return os.path.getsize(path) >= _HEADER_BYTES
    except FileNotFoundError:  # a dead process's live gauge, removed since the glob
        return False


def multiprocess_registry() -> CollectorRegistry:
    """A registry that sums the files in PROMETHEUS_MULTIPROC_DIR (which must be set)."""
    registry = CollectorRegistry()
    registry.register(SettledFilesCollector(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
    return registry
