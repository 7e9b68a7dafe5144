"""A web shutting down with open event streams ends each with `event: end` and exits at once.

Before [3.1], a stream held its gunicorn worker until the worker's graceful timeout (30 s),
which then cut it: `driftless up` SIGKILLed the web after its own 10 s, and the client
saw a dropped connection instead of the end of the response. Now every stream gets
`event: end` with `{"reason": "shutdown"}`, the response ends as HTTP says (the last
chunk), and the process exits within a few seconds: on SIGTERM (gunicorn's graceful
stop: the supervisor's, an orchestrator's) and on SIGINT (a terminal's Ctrl-C, which
reaches the master and its workers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.faults.conftest import new_api_key, report
from tests.faults.http import Api
from tests.faults.procs import PrivateRedis, Processes, driftless_env, free_port
from tests.sse_client import EventStream, rest

# Far inside gunicorn's graceful timeout (30 s) and `driftless up`'s grace (10 s).
EXIT_WITHIN_S = 5.0
SHUTDOWN = ("end", '{"reason": "shutdown"}')


@pytest.mark.faults
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_shutdown_ends_every_open_stream_and_the_web_exits_at_once(
    signum: signal.Signals, processes: Processes, private_redis: PrivateRedis,
    fresh_database: str,
) -> None:  # fmt: skip
    env = driftless_env(
        DATABASE_URL=fresh_database,
        REDIS_URL=private_redis.url,
        CELERY_BROKER_URL=private_redis.url,
        DRIFTLESS_LLM="local",
    )
    port = free_port()
    web = processes.web(env, port)
    key = new_api_key(fresh_database)
    sid = Api(port, key).new_session()["id"]
    streams = [EventStream(port, key, sid) for _ in range(4)]  # both workers, likely
    try:
        assert [stream.next() for stream in streams] == [("ready", "{}")] * len(streams)
        os.killpg(web.pid, signum)  # the whole group, as a supervisor or a terminal does
        signalled = time.monotonic()
        # `end` with its reason, then the response's last chunk: no IncompleteRead.
        received = [rest(stream) for stream in streams]
        ended_s = time.monotonic() - signalled
        try:
            status: int | None = web.process.wait(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            status = None
        exited_s = time.monotonic() - signalled
    finally:
        for stream in streams:
            stream.close()
    report(
        f"stream shutdown [{signal.Signals(signum).name}]: {len(streams)} streams ended"
        f" {ended_s:.2f} s after the signal; web exited with {status} after {exited_s:.2f} s"
    )
    assert received == [[SHUTDOWN]] * len(streams)
    assert status == 0, web.tail()
    assert exited_s < EXIT_WITHIN_S
    assert "graceful timeout" not in web.output()
