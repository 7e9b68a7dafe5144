"""Ctrl-C on `driftless up` with an open event stream: the client gets `event: end`, the
response ends cleanly, and the web stops within the supervisor's grace, never SIGKILLed.

Before [3.1] the stream kept its gunicorn worker waiting for gunicorn's graceful timeout
(30 s), so the supervisor killed the web after its own 10 s and the client saw a dropped
connection.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services
from tests.faults.http import Api
from tests.faults.procs import free_port
from tests.sse_client import EventStream, rest
from worker.supervisor import KILL_WAIT_S, STOP_GRACE_S

UP_BROKER_REDIS_DB = services.DATA_REDIS_DB - 3
START_TIMEOUT_S = 60.0


@pytest.fixture
def up(
    database_url: str, redis_url: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """`driftless up` on a free port; its own output (not its children's) in a file."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": f"{services.redis_base_url()}/{UP_BROKER_REDIS_DB}",
        "PORT": str(port),
        "DRIFTLESS_HOME": str(tmp_path),
        "DRIFTLESS_WORKER_METRICS_PORT": "0",  # 9808 may be a running system's
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "driftless"), "up"],
            env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
    yield process, port, errors
    if process.poll() is None:  # a failed test: the supervisor still stops its tree
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S + KILL_WAIT_S + 10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.stdout is not None
    process.stdout.close()


def _dev_key(process: subprocess.Popen[str]) -> str:
    """The dev key `up` prints last once the web answers."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("dl_"):
            return line.strip()
    raise AssertionError(f"`driftless up` exited with {process.wait()} before it was up")


def test_ctrl_c_ends_open_streams_with_end_shutdown_and_stops_the_web_without_sigkill(
    up: tuple[subprocess.Popen[str], int, Path],
) -> None:
    process, port, errors = up
    key = _dev_key(process)
    sid = Api(port, key).new_session()["id"]
    streams = [EventStream(port, key, sid) for _ in range(3)]
    try:
        assert [stream.next() for stream in streams] == [("ready", "{}")] * len(streams)
        process.send_signal(signal.SIGINT)
        stopping = time.monotonic()
        received = [rest(stream) for stream in streams]
        status = process.wait(timeout=STOP_GRACE_S + KILL_WAIT_S + 10)
        stopped_s = time.monotonic() - stopping
    finally:
        for stream in streams:
            stream.close()
    assert received == [[("end", '{"reason": "shutdown"}')]] * len(streams)
    said = errors.read_text()
    assert status == 0 and "killed" not in said, said
    assert stopped_s < STOP_GRACE_S
