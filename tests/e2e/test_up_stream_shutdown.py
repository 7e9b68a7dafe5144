"""Ctrl-C on `driftless up` with an open event stream: the client gets `event: end`, the
response ends cleanly, and the web stops within the supervisor's grace, never SIGKILLed.

Before [3.1] the stream kept its gunicorn worker waiting for gunicorn's graceful timeout
(30 s), so the supervisor killed the web after its own 10 s and the client saw a dropped
connection.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.up import DRIFTLESS, STOPPED_WITHIN_S, stop_up, up_environment
from tests.faults.http import Api
from tests.faults.procs import free_port
from tests.sse_client import EventStream, rest
from worker.supervisor import STOP_GRACE_S

START_TIMEOUT_S = 60.0


@pytest.fixture
def up(
    database_url: str, redis_url: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """`driftless up` on a free port; its own output (not its children's) in a file."""
    port = free_port()
    env = up_environment(database_url=database_url, redis_url=redis_url, home=tmp_path, port=port)
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            [DRIFTLESS, "up"],
            env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
    yield process, port, errors
    stop_up(process, signal.SIGTERM)
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
        status = process.wait(timeout=STOPPED_WITHIN_S)
        stopped_s = time.monotonic() - stopping
    finally:
        for stream in streams:
            stream.close()
    assert received == [[("end", '{"reason": "shutdown"}')]] * len(streams)
    said = errors.read_text()
    assert status == 0 and "killed" not in said, said
    assert stopped_s < STOP_GRACE_S
