"""PROMETHEUS_MULTIPROC_DIR for a worker, set before prometheus_client is first imported.

prometheus_client picks multiprocess mode when it is imported, from that variable. A
prefork worker's tasks run in child processes, so their counts must go to files the
main process can sum and serve (worker.metrics). Standard library only, on purpose:
importing this module must not import prometheus_client.
"""

import atexit
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

PRIVATE_DIR_PREFIX = "driftless-metrics-"


def remove_orphaned_dirs() -> None:
    """Private directories of workers that died without clean-up (kill -9), by owner pid."""
    for path in Path(tempfile.gettempdir()).glob(PRIVATE_DIR_PREFIX + "*-*"):
        pid = path.name.removeprefix(PRIVATE_DIR_PREFIX).split("-", 1)[0]
        if not pid.isdigit():
            continue
        with contextlib.suppress(PermissionError):  # alive, and someone else's
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(path, ignore_errors=True)


def ensure_multiprocess_dir() -> str:
    """The operator's PROMETHEUS_MULTIPROC_DIR, else a private one removed at exit."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return os.environ["PROMETHEUS_MULTIPROC_DIR"]
    remove_orphaned_dirs()
    owner = os.getpid()
    path = tempfile.mkdtemp(prefix=f"{PRIVATE_DIR_PREFIX}{owner}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path  # inherited by the pool's children

    def _remove() -> None:
        if os.getpid() == owner:  # a forked child exiting must not take the parent's files
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(_remove)
    return path
