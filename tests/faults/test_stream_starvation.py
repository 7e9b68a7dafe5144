"""One org opens 50 idle live event streams: /healthz and another org's API keep answering.

Before [2.1], 20 idle `GET …/events` from one org took every thread of the web tier
(2 workers × 8 threads) and /healthz and every other org's calls waited 30 s. Since
[2.3] the web runs gunicorn's gevent worker (the Procfile's `--worker-class
web.server.FairGeventWorker --worker-connections 1000`): an open stream holds a
greenlet and a connection slot, not a thread, and a process admits streams into three
quarters of its connections only, so ordinary requests always find room. An org never
holds more than `DRIFTLESS_MAX_STREAMS_PER_ORG` streams across the fleet; what is
refused is refused at once, with 429 and a Retry-After.

- `default`: org A gets exactly its limit (20) and 30 × `too_many_streams`, wherever its
  requests land; the tier (2 × 750 stream slots) has room to spare, so org B opens a
  stream of its own and its API calls answer.
- `org_limit_3`: the same at a limit of 3 (47 refusals).
- A process with few connections (`--worker-connections 16`: 12 stream slots) fills up:
  the rest is `streams_busy`, and /healthz still answers from the connections kept for
  requests.

Either way org A's streams give their slots back once its clients go away (reset), which
the server notices at its next ping, and org A can stream again.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import redis

from tests.faults.conftest import new_api_key, report
from tests.faults.db import org_of
from tests.faults.http import NO_ANSWER, Api
from tests.faults.procs import (
    PrivateRedis,
    Processes,
    driftless_env,
    free_port,
    wait_until,
)

STREAMS = 50
PROBE_S = 4.0
# Long enough to tell "refused at once" from "queued behind a full server" (which
# would wait forever for a connection slot) without waiting long when a run fails.
OPEN_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 5.0
# The server notices a client that went away at its next ping (every 5 s).
RELEASE_WITHIN_S = 15.0
# A process of `--worker-connections 16` admits three quarters of them as streams.
SMALL_CONNECTIONS = 16
SMALL_STREAMS = 12


@dataclass
class Attempt:
    """One `GET …/events`: its answer, and the open connection if it is a stream."""

    status: int
    latency_s: float
    retry_after: str | None = None
    code: str | None = None
    first_bytes: bytes = b""
    error: str | None = None
    connection: http.client.HTTPConnection | None = None
    response: http.client.HTTPResponse | None = None

    def reset(self) -> None:
        """The client goes away abruptly (RST), as a killed browser or script does."""
        if self.connection is None or self.connection.sock is None:
            return
        linger = struct.pack("ii", 1, 0)
        self.connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        if self.response is not None:
            self.response.close()
        self.connection.close()


def open_stream(port: int, key: str, sid: str) -> Attempt:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=OPEN_TIMEOUT_S)
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    sent = time.monotonic()
    try:
        connection.request("GET", f"/agents-api/sessions/{sid}/events", headers=headers)
        response = connection.getresponse()
        latency = time.monotonic() - sent
        if response.status == 200:
            first = response.read1(256)  # the `ready` event, sent with the headers
            return Attempt(
                200, latency, first_bytes=first, connection=connection, response=response
            )
        raw = response.read()
    except OSError as exc:  # no answer within the timeout: queued behind busy threads
        connection.close()
        return Attempt(NO_ANSWER, time.monotonic() - sent, error=f"{type(exc).__name__}: {exc}")
    connection.close()
    try:
        code = json.loads(raw)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    return Attempt(response.status, latency, response.getheader("Retry-After"), code)


def open_streams(port: int, key: str, sid: str, count: int) -> list[Attempt]:
    """`count` attempts at once, as a script opening streams in a loop of threads would."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda _: open_stream(port, key, sid), range(count)))


@dataclass(frozen=True)
class Probe:
    kind: str
    status: int
    latency_s: float
    error: str | None


def probe(api: Api, sid: str, seconds: float) -> list[Probe]:
    """/healthz, a new session and a context read of org B, in turn, for `seconds`."""
    calls = {
        "healthz": lambda: api.get("/healthz"),
        "new session": lambda: api.post(
            "/agents-api/sessions", {"agentId": "agent-b", "userId": "user-b"}
        ),
        "context": lambda: api.get(f"/agents-api/sessions/{sid}/context"),
    }
    probes: list[Probe] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for kind, call in calls.items():
            sent = time.monotonic()
            answer = call()
            probes.append(Probe(kind, answer.status, time.monotonic() - sent, answer.error))
    return probes


def failed(probes: list[Probe]) -> list[Probe]:
    """Probes without a 2xx within the client's timeout (unanswered ones included)."""
    return [p for p in probes if not 200 <= p.status < 300]


CASES = {
    "default": {},
    "org_limit_3": {"DRIFTLESS_MAX_STREAMS_PER_ORG": "3"},
}


@pytest.mark.faults
@pytest.mark.parametrize("case", list(CASES))
def test_one_orgs_idle_streams_cannot_starve_healthz_or_another_orgs_api(
    case: str, processes: Processes, private_redis: PrivateRedis, fresh_database: str
) -> None:
    values = CASES[case]
    env = driftless_env(
        DATABASE_URL=fresh_database,
        REDIS_URL=private_redis.url,
        CELERY_BROKER_URL=private_redis.url,
        DRIFTLESS_LLM="local",
        **values,
    )
    port = free_port()
    processes.web(env, port)
    key_a, key_b = new_api_key(fresh_database), new_api_key(fresh_database)
    api_a, api_b = Api(port, key_a, PROBE_TIMEOUT_S), Api(port, key_b, PROBE_TIMEOUT_S)
    sid_a, sid_b = api_a.new_session()["id"], api_b.new_session()["id"]
    org_limit = int(values.get("DRIFTLESS_MAX_STREAMS_PER_ORG", "20"))

    attempts: list[Attempt] = []
    extra: list[Attempt] = []
    try:
        attempts = open_streams(port, key_a, sid_a, STREAMS)
        probes = probe(api_b, sid_b, PROBE_S)
        b_stream = open_stream(port, key_b, sid_b)
        extra.append(b_stream)

        statuses = Counter(a.status for a in attempts)
        codes = Counter(a.code for a in attempts if a.status != 200)
        bad = failed(probes)
        worst = max(p.latency_s for p in probes)
        report(
            f"stream starvation [{case}]: {STREAMS} streams from org A: {statuses[200]} × 200,"
            f" {statuses[429]} × 429 {dict(codes)}, {statuses[NO_ANSWER]} unanswered in"
            f" {OPEN_TIMEOUT_S:.0f} s, slowest answer {max(a.latency_s for a in attempts):.3f} s;"
            f" {len(probes)} probes of /healthz and org B's API over {PROBE_S:.0f} s:"
            f" {len(bad)} failed or unanswered in {PROBE_TIMEOUT_S:.0f} s,"
            f" max latency {worst:.3f} s; org B's own stream: {b_stream.status}"
        )

        # The attack is contained: /healthz and org B answer.
        assert not bad, bad[:5]
        # Org A is told no at once, with the contract's error and when to come back.
        assert statuses[NO_ANSWER] == 0, [a.error for a in attempts if a.error][:3]
        assert set(statuses) <= {200, 429}, statuses
        refused = [a for a in attempts if a.status == 429]
        assert all(a.retry_after and int(a.retry_after) >= 1 for a in refused), refused[:3]
        assert all(a.first_bytes.startswith(b"event: ready") for a in attempts if a.status == 200)
        # The org's limit binds, not the server: the tier holds far more streams.
        assert statuses[200] == org_limit
        assert codes == {"too_many_streams": STREAMS - org_limit}
        assert b_stream.status == 200  # another org streams meanwhile

        # Org A's clients vanish: their leases and thread slots come back.
        went_away = time.monotonic()
        for attempt in attempts + extra:
            attempt.reset()
        leases = redis.Redis.from_url(private_redis.url)
        key = f"driftless:streams:{{{org_of(fresh_database, key_a)}}}"
        wait_until(
            lambda: leases.zcard(key) == 0,
            timeout=RELEASE_WITHIN_S,
            what=lambda: f"org A's leases to be released: {leases.zrange(key, 0, -1)}",
            interval=0.2,
        )
        released_s = time.monotonic() - went_away
        again = _open_until_ok(port, key_a, sid_a, timeout=RELEASE_WITHIN_S)
        extra.append(again)
        report(
            f"stream starvation [{case}]: org A's leases released {released_s:.1f} s after its"
            f" clients reset; a new stream of org A: {again.status}"
        )
        assert again.status == 200
    finally:
        for attempt in attempts + extra:
            attempt.reset()


def _open_until_ok(port: int, key: str, sid: str, *, timeout: float) -> Attempt:
    """A process may need one more ping to notice its last stream went away."""
    deadline = time.monotonic() + timeout
    while True:
        attempt = open_stream(port, key, sid)
        if attempt.status == 200 or time.monotonic() > deadline:
            return attempt
        time.sleep(0.5)


@pytest.mark.faults
def test_a_full_process_refuses_streams_and_still_answers_healthz(
    processes: Processes, private_redis: PrivateRedis, fresh_database: str
) -> None:
    """`--worker-connections 16`: 12 streams, then `streams_busy`; /healthz answers."""
    env = driftless_env(
        DATABASE_URL=fresh_database,
        REDIS_URL=private_redis.url,
        CELERY_BROKER_URL=private_redis.url,
        DRIFTLESS_LLM="local",
    )
    port = free_port()
    processes.web(env, port, workers=1, worker_connections=SMALL_CONNECTIONS)
    key = new_api_key(fresh_database)
    api = Api(port, key, PROBE_TIMEOUT_S)
    attempts: list[Attempt] = []
    try:
        attempts = open_streams(port, key, api.new_session()["id"], SMALL_STREAMS + 6)
        healthz = [probe_once(api) for _ in range(20)]
        statuses = Counter(a.status for a in attempts)
        codes = Counter(a.code for a in attempts if a.status != 200)
        report(
            f"stream starvation [--workers 1 --worker-connections {SMALL_CONNECTIONS}]:"
            f" {SMALL_STREAMS + 6} streams: {statuses[200]} × 200, {dict(codes)},"
            f" {statuses[NO_ANSWER]} unanswered; 20 × /healthz: {len(failed(healthz))} failed,"
            f" max latency {max(p.latency_s for p in healthz):.3f} s"
        )
        assert statuses[200] == SMALL_STREAMS and codes == {"streams_busy": 6}
        refused = [a for a in attempts if a.status == 429]
        assert all(a.retry_after and int(a.retry_after) >= 1 for a in refused), refused[:3]
        assert not failed(healthz), healthz
    finally:
        for attempt in attempts:
            attempt.reset()


def probe_once(api: Api) -> Probe:
    sent = time.monotonic()
    answer = api.get("/healthz")
    return Probe("healthz", answer.status, time.monotonic() - sent, answer.error)
