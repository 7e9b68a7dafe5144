"""[4.4] Traces from the Procfile's real processes over OTLP: the configuration path as an
operator uses it, nothing but the SDK's variables, into a receiver of the test's own
(tests/otlp_receiver.py).

The web (gunicorn's gevent worker), beat and a gevent worker are started once for the
module with OTEL_EXPORTER_OTLP_ENDPOINT; each case that needs another worker (gRPC and a
name of its own, prefork, none of it) stops the one before and starts its own, on the same
Redis and database (and a web of its own where the web's configuration is the point). The
batch processor sends every 200 ms (OTEL_BSP_SCHEDULE_DELAY), so a turn's spans arrive
within a second of its end.

- a: one trace per turn across processes (web → org's list → worker → model), and beat's
  periodic sends as roots the worker continues; gzip-compressed and plain exports;
- b, c: OTEL_SERVICE_NAME, and OTLP/gRPC from the gevent worker and the gevent web, which
  go on serving while an export waits for its answer (gRPC made green, or they stall);
- d: no endpoint, nothing sent; e: prefork, each child traced, the parent silent;
- f: a process told to stop sends the spans it still holds (a prefork child too).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from shared.infra.db.migrate import upgrade
from shared.infra.queue import ENQUEUE_SPAN, SUMMARIZE_TOPIC
from shared.llm.local_provider import LOCAL_MODEL
from tests import services
from tests.faults.conftest import FAILED, new_api_key
from tests.faults.db import org_of, topics_of
from tests.faults.http import Api
from tests.faults.procs import (
    Child,
    PrivateRedis,
    Processes,
    driftless_env,
    free_port,
    wait_until,
)
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, Received, Span
from worker.fair import MODEL_JOB_SPAN

CLOSE_ROUTE = "POST /agents-api/sessions/<sid>/topics"
SERVER, PRODUCER = 2, 4  # the protobuf's SpanKind
TRACES_ON = "traces on:"  # shared/infra/tracing.py's log line when a process starts them
BATCH_DELAY_MS = 200
WAIT_S = 30.0
HTTP = "gevent, OTLP/HTTP"  # the module's first worker


@dataclass
class Stack:
    """The module's processes on one Redis and database; `worker` is whichever runs now."""

    processes: Processes
    database_url: str
    redis_url: str
    http: HttpReceiver
    grpc: GrpcReceiver
    web_port: int
    web: Child
    beat: Child
    worker: Child
    worker_kind: str
    keys: list[str] = field(default_factory=list)

    def env(self, **values: str) -> dict[str, str]:
        return system_env(self.database_url, self.redis_url, **values)

    def traced(self, endpoint: str, **values: str) -> dict[str, str]:
        return traced_env(self.database_url, self.redis_url, endpoint, **values)

    def use_worker(
        self, kind: str, env: dict[str, str], *, pool: str = "gevent", concurrency: int = 16
    ) -> Child:
        """The running worker if it is of this `kind`; else that one is stopped and this one
        started (one worker at a time: each turn's job is served by the one asked for)."""
        if kind != self.worker_kind or not self.worker.alive():
            self.worker.terminate()
            self.worker = self.processes.worker(env, pool=pool, concurrency=concurrency)
            self.worker_kind = kind
        return self.worker

    def api(self, port: int | None = None) -> Api:
        if not self.keys:
            self.keys.append(new_api_key(self.database_url))
        return Api(port or self.web_port, self.keys[0], WAIT_S)


def system_env(database_url: str, redis_url: str, **values: str) -> dict[str, str]:
    """The system's settings with no OpenTelemetry variable but `values`."""
    env = driftless_env(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        CELERY_BROKER_URL=redis_url,
        DRIFTLESS_LLM="local",
        DRIFTLESS_RECONCILE_S="2",  # beat sends every 2 s: its spans come soon
    )
    return {k: v for k, v in env.items() if not k.startswith("OTEL_")} | values


def traced_env(database_url: str, redis_url: str, endpoint: str, **values: str) -> dict[str, str]:
    traced = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": str(BATCH_DELAY_MS),
    }
    return system_env(database_url, redis_url, **(traced | values))


def _start_stack(processes: Processes, database_url: str, http: HttpReceiver,
                 grpc: GrpcReceiver) -> Stack:  # fmt: skip
    redis_url = PrivateRedis(processes).start().url
    port = free_port()
    # The web's exports gzip-compressed, the others' not: the receiver takes both.
    web_env = traced_env(database_url, redis_url, http.endpoint,
                         OTEL_EXPORTER_OTLP_COMPRESSION="gzip")  # fmt: skip
    env = traced_env(database_url, redis_url, http.endpoint)
    # Side by side: each spends seconds importing. One web process is enough for one trace.
    web = processes.web(web_env, port, workers=1, wait=False)
    beat = processes.beat(env, wait=False)
    worker = processes.worker(env, wait=False)
    for child in (web, beat, worker):
        child.wait_ready()
    return Stack(processes, database_url, redis_url, http, grpc, port, web, beat, worker, HTTP)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    admin = services.admin_database_url()
    name = f"{services.TEST_DATABASE}_otlp_procs"
    database_url = services.recreate_database(admin, name)
    upgrade(database_url)
    processes = Processes(tmp_path_factory.mktemp("otlp-procs"))
    try:
        with HttpReceiver() as http, GrpcReceiver() as grpc:
            yield _start_stack(processes, database_url, http, grpc)
    finally:
        processes.close()
        services.drop_database(admin, name)


@pytest.fixture(autouse=True)
def logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """The end of each child's log in a failed test's report (the module's processes are
    not the faults conftest's `processes`, which does this for its own)."""
    yield
    if "stack" in request.fixturenames and request.node.stash.get(FAILED, False):
        stack: Stack = request.getfixturevalue("stack")
        for child in stack.processes.children:
            print(f"\n----- {child.name} (pid {child.pid}) {child.log} -----\n{child.tail(40)}")


# --- a turn, and its spans -----------------------------------------------------------------


def close_a_topic(api: Api) -> str:
    """A message posted and its topic closed over HTTP: the summary goes to the worker."""
    session = api.new_session(user=f"user-{uuid.uuid4().hex[:8]}")
    assert api.post_message(session["id"], "Ship the beta on Friday").status == 201
    assert api.close_topic(session["id"]).status == 201
    return str(session["activeTopicId"])


def wait_for_summary(stack: Stack, api: Api, topic_id: str) -> None:
    """Until the topic's summary is stored (whether or not anything was traced)."""
    org = org_of(stack.database_url, api.key)
    wait_until(
        lambda: any(
            t.summarized for t in topics_of(stack.database_url, org) if str(t.id) == topic_id
        ),
        timeout=WAIT_S,
        what=f"topic {topic_id}'s summary",
    )


def wait_for_span(received: Received, what: str, test: Callable[[Span], bool]) -> Span:
    found: list[Span] = []

    def arrived() -> bool:
        found[:] = received.spans(test)
        return bool(found)

    wait_until(arrived, timeout=WAIT_S, what=lambda: f"{what}; services {received.services()}")
    return found[0]


def summary_job(received: Received, topic_id: str) -> Span:
    """The worker's `driftless.model_job` span of the topic's summary."""
    return wait_for_span(
        received, f"the summary job's span of topic {topic_id}",
        lambda s: s.name == MODEL_JOB_SPAN
        and s.attributes.get("driftless.topic_id") == topic_id
        and s.attributes.get("driftless.job.task") == SUMMARIZE_TOPIC,
    )  # fmt: skip


def by_id(*receivers: Received) -> dict[int, Span]:
    return {s.span_id: s for r in receivers for s in r.spans()}


def ancestors(span: Span, spans: dict[int, Span]) -> list[Span]:
    """The span's parent, its parent's, … up to the root (each must have been received)."""
    chain = []
    while span.parent_span_id is not None:
        assert span.parent_span_id in spans, f"the parent of {span.name} never arrived"
        span = spans[span.parent_span_id]
        chain.append(span)
    return chain


def under(ancestor: Span, spans: dict[int, Span]) -> list[Span]:
    """The spans received so far below `ancestor` (others may wait for a parent still in
    its process's queue: a task running now)."""

    def descends(span: Span) -> bool:
        while span.parent_span_id in spans:
            span = spans[span.parent_span_id]  # type: ignore[index]
            if span.span_id == ancestor.span_id:
                return True
        return False

    return [s for s in spans.values() if descends(s)]


def request_root(job: Span, *receivers: Received) -> list[Span]:
    """The job's ancestors, once the request's own span (the trace's root) has arrived."""

    def complete() -> bool:
        spans = by_id(*receivers)
        chain = [job]
        while chain[-1].parent_span_id in spans:
            chain.append(spans[chain[-1].parent_span_id])  # type: ignore[index]
        return chain[-1].parent_span_id is None

    wait_until(complete, timeout=WAIT_S, what=f"the ancestors of {job.name} to arrive")
    return ancestors(job, by_id(*receivers))


def assert_one_turn(job: Span, chain: list[Span], spans: dict[int, Span], worker: str) -> None:
    """The close's request (the web's server span) is the root of the job's trace, through
    the web's enqueue; the model call is the job's (the worker's) child."""
    root, enqueue = chain[-1], chain[0]
    assert (root.service, root.kind, root.name) == ("driftless-web", SERVER, CLOSE_ROUTE)
    assert (enqueue.service, enqueue.name) == ("driftless-web", ENQUEUE_SPAN)
    assert job.service == worker
    assert {s.trace_id for s in chain} == {job.trace_id}
    chats = [s for s in under(job, spans) if s.name == f"chat {LOCAL_MODEL}"]
    assert [(c.service, c.trace_id) for c in chats] == [(worker, job.trace_id)]
    assert chats[0].attributes["driftless.llm.purpose"] == "summarize"


# --- the cases -------------------------------------------------------------------------


def test_44_a_web_worker_and_beat_send_one_trace_per_turn_over_otlp_http(stack: Stack) -> None:
    stack.use_worker(HTTP, stack.traced(stack.http.endpoint))
    topic_id = close_a_topic(stack.api())

    job = summary_job(stack.http, topic_id)
    chain = request_root(job, stack.http)
    spans = by_id(stack.http)
    assert_one_turn(job, chain, spans, "driftless-worker")
    # The worker's side of the turn: its SQL and the ticket's run, linked from the job.
    below = under(job, spans)
    assert any(s.attributes.get("db.system") == "postgresql" for s in below), below
    [(_, ticket_id)] = job.links
    ticket = wait_for_span(stack.http, "the ticket's run", lambda s: s.span_id == ticket_id)
    assert (ticket.service, ticket.name) == ("driftless-worker", "run/driftless.next_model_job")
    # The web's exports came gzip-compressed, the worker's and beat's as they are.
    assert {"gzip", ""} <= set(stack.http.encodings)
    for child in (stack.web, stack.worker, stack.beat):  # beat says so after it is ready
        wait_until(lambda c=child: TRACES_ON in c.output(), timeout=WAIT_S, what=child.name)


def test_44_a_beat_sends_its_periodic_jobs_as_roots_the_worker_continues(stack: Stack) -> None:
    stack.use_worker(HTTP, stack.traced(stack.http.endpoint))

    def continued(run: Span) -> bool:
        if not run.name.startswith("run/"):
            return False
        send = by_id(stack.http).get(run.parent_span_id or 0)
        return send is not None and send.service == "driftless-beat"

    run = wait_for_span(stack.http, "a run of a job beat sent", continued)
    send = by_id(stack.http)[run.parent_span_id or 0]
    task = send.name.removeprefix("apply_async/")
    assert (send.kind, send.parent_span_id, send.name) == (PRODUCER, None, f"apply_async/{task}")
    assert (run.service, run.name, run.trace_id) == ("driftless-worker", f"run/{task}",
                                                      send.trace_id)  # fmt: skip


@pytest.fixture
def grpc_worker(stack: Stack) -> Child:
    """The Procfile's gevent worker exporting over gRPC, under a name of the operator's."""
    env = stack.traced(stack.grpc.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                       OTEL_SERVICE_NAME="my-memory", OTEL_EXPORTER_OTLP_TIMEOUT="120")  # fmt: skip
    return stack.use_worker("grpc, my-memory", env)


def test_44_b_otel_service_name_renames_the_worker(stack: Stack, grpc_worker: Child) -> None:
    topic_id = close_a_topic(stack.api())
    job = summary_job(stack.grpc, topic_id)
    assert job.service == "my-memory"
    assert job.resource["service.name"] == "my-memory"
    assert "driftless-worker" not in stack.grpc.services()


def test_44_c_a_gevent_worker_exports_over_grpc_and_serves_while_an_export_waits(
    stack: Stack, grpc_worker: Child
) -> None:
    """gRPC under gevent: the exports arrive, and while one waits for the collector's answer
    the worker's other greenlets go on (shared/infra/tracing.py makes gRPC green). A gRPC
    that blocked the process would hold the next turn's summary until the export ended
    (OTEL_EXPORTER_OTLP_TIMEOUT, 120 s here), long after this test gave up waiting."""
    api = stack.api()
    topic_id = close_a_topic(api)
    job = summary_job(stack.grpc, topic_id)
    # The request's spans went over HTTP (the web's), the job's over gRPC: one trace.
    chain = request_root(job, stack.http, stack.grpc)
    assert_one_turn(job, chain, by_id(stack.http, stack.grpc), "my-memory")

    stack.grpc.hold()
    try:
        # beat's reconcile, every 2 s, gives the worker spans to send
        wait_until(lambda: stack.grpc.holds("my-memory"), timeout=WAIT_S, what="an export held")
        topic_id = close_a_topic(api)
        wait_for_summary(stack, api, topic_id)
        assert stack.grpc.holds("my-memory")  # served while the export still waited
    finally:
        stack.grpc.release()
    summary_job(stack.grpc, topic_id)


def test_44_c_the_gevent_web_exports_over_grpc_and_answers_while_an_export_waits(
    stack: Stack,
) -> None:
    """The same of the web (gunicorn's gevent worker): a request while the process's last
    export waits for its answer is answered, and its spans follow."""
    env = stack.traced(stack.grpc.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                       OTEL_SERVICE_NAME="my-web", OTEL_EXPORTER_OTLP_TIMEOUT="120")  # fmt: skip
    port = free_port()
    web = stack.processes.web(env, port, workers=1)
    api = stack.api(port)
    stack.grpc.hold()
    try:
        api.new_session()  # its spans go out 200 ms after it
        wait_until(lambda: stack.grpc.holds("my-web"), timeout=WAIT_S, what="an export held")
        api.new_session()
        assert stack.grpc.holds("my-web")  # answered while the export still waited
    finally:
        stack.grpc.release()
    posts = lambda: stack.grpc.spans(  # noqa: E731
        lambda s: (s.service, s.kind, s.name) == ("my-web", SERVER, "POST /agents-api/sessions")
    )
    wait_until(lambda: len(posts()) == 2, timeout=WAIT_S, what="both requests' spans")
    web.terminate()


def test_44_d_without_an_endpoint_the_processes_send_nothing(stack: Stack) -> None:
    """A web and a worker whose only mention of the receiver is a variable of another signal
    (metrics, logs): the turn is served and summarized, and the receiver gets nothing."""
    with HttpReceiver() as quiet:
        env = stack.env(
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=quiet.endpoint,
            OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=quiet.endpoint,
            OTEL_BSP_SCHEDULE_DELAY=str(BATCH_DELAY_MS),
        )
        port = free_port()
        web = stack.processes.web(env, port, workers=1, wait=False)
        worker = stack.use_worker("untraced", env)
        web.wait_ready()
        api = stack.api(port)
        topic_id = close_a_topic(api)
        wait_for_summary(stack, api, topic_id)
        time.sleep(5 * BATCH_DELAY_MS / 1000)  # a traced process would have sent by now
        web.terminate()
        assert quiet.exports == 0, quiet.services()
    for child in (web, worker):
        assert TRACES_ON not in child.output(), child.name


def test_44_e_a_prefork_child_exports_its_own_spans(stack: Stack) -> None:
    """Tracing starts in each pool child (worker_process_init), not in the parent: the job's
    span comes from a process whose parent is the worker's main process."""
    env = stack.traced(stack.http.endpoint, OTEL_EXPERIMENTAL_RESOURCE_DETECTORS="process")
    worker = stack.use_worker("prefork", env, pool="prefork", concurrency=2)
    topic_id = close_a_topic(stack.api())

    job = summary_job(stack.http, topic_id)
    assert job.resource["process.parent_pid"] == worker.pid
    # Only the children send: the parent runs no task, and has no provider of its own.
    senders = {s.resource.get("process.pid") for s in stack.http.spans()} - {None}
    assert worker.pid not in senders
    assert job.resource["process.pid"] in senders
    chain = request_root(job, stack.http)
    spans = by_id(stack.http)
    assert_one_turn(job, chain, spans, "driftless-worker")
    below = under(job, spans)
    assert any(s.attributes.get("db.system") == "postgresql" for s in below), [
        s.name for s in below
    ]


def test_44_the_receiver_refuses_what_it_cannot_read() -> None:
    """The receiver's own honesty: a body it cannot decode is a 400, not an empty export."""
    import urllib.error
    import urllib.request

    with HttpReceiver() as receiver:
        request = urllib.request.Request(
            receiver.endpoint + "/v1/traces", data=b"not gzip", method="POST",
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
        )  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        refused.value.close()  # the answer's socket
        assert refused.value.code == 400
        assert receiver.exports == 0


def stop(child: Child) -> None:
    """SIGTERM to the process alone, as an orchestrator stops a container (its pool's
    children are its to stop), and wait for its exit. One that does not exit is made to
    write its threads' stacks to its log (PYTHONFAULTHANDLER), which a failure prints."""
    os.kill(child.pid, signal.SIGTERM)
    try:
        child.process.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGABRT)
        time.sleep(1)  # the stacks reach the log
        raise AssertionError(f"{child.name} still running {WAIT_S} s after SIGTERM") from None


@pytest.mark.parametrize("pool", ["prefork", "gevent"])
def test_44_f_a_process_told_to_stop_sends_its_last_spans_first(stack: Stack, pool: str) -> None:
    """Spans wait in the batch processor's queue (OTEL_BSP_SCHEDULE_DELAY, 5 s by default;
    a minute here): a web or worker that stops sends them before it exits, a prefork pool's
    child too, though it leaves by os._exit, which skips the provider's atexit flush."""
    env = stack.traced(stack.http.endpoint, OTEL_BSP_SCHEDULE_DELAY="60000", PYTHONFAULTHANDLER="1")
    port = free_port()
    web = stack.processes.web(env, port, workers=1, wait=False)
    worker = stack.use_worker(f"{pool}, sends a minute late", env, pool=pool, concurrency=2)
    web.wait_ready()
    api = stack.api(port)
    topic_id = close_a_topic(api)
    wait_for_summary(stack, api, topic_id)
    stop(worker)
    stop(web)
    job = summary_job(stack.http, topic_id)
    chain = request_root(job, stack.http)
    assert_one_turn(job, chain, by_id(stack.http), "driftless-worker")
