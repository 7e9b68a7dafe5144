"""[4.4] One trace per turn, through the real worker: the request, the enqueue, the wait in
the org's list, the ticket's task, the model call, SQL and Redis, and a webhook delivery
that carries `traceparent`. No span holds what was posted, a key or a token."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy.exc import OperationalError

from shared.infra import tracing
from shared.infra.fair import FairJob
from shared.infra.queue import ENQUEUE_SPAN, EVALUATE_TOPIC, SUMMARIZE_TOPIC
from shared.llm.local_provider import LOCAL_MODEL
from tests.helpers import new_session, post_message, wait_for
from tests.tracing.conftest import Traced
from tests.webhook_receiver import Receiver
from worker.fair import MODEL_JOB_SPAN, RETRY_AFTER_S, serve_next

SCOPE = "agentId=agent-1&userId=user-1"


def _model_job(traced: Traced, task: str, topic_id: str) -> ReadableSpan:
    def find() -> ReadableSpan | None:
        for span in traced.spans():
            attributes = span.attributes or {}
            if (
                span.name == MODEL_JOB_SPAN
                and attributes.get("driftless.job.task") == task
                and attributes.get("driftless.topic_id") == topic_id
            ):
                return span
        return None

    return wait_for(find, timeout=60, what=f"the {task} job's span for {topic_id}")


def _trace(traced: Traced, trace_id: int) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in traced.spans() if s.context.trace_id == trace_id}


def _ancestors(span: ReadableSpan, spans: dict[int, ReadableSpan]) -> list[ReadableSpan]:
    """The span's parent, its parent's, … up to the trace's root (all of them exported)."""
    chain = []
    while span.parent is not None:
        span = spans[span.parent.span_id]
        chain.append(span)
    return chain


def _under(spans: dict[int, ReadableSpan], ancestor: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans.values() if ancestor in _ancestors(s, spans)]


def _the(
    spans: list[ReadableSpan], what: str, test: Callable[[ReadableSpan], bool]
) -> ReadableSpan:
    found = [s for s in spans if test(s)]
    assert len(found) == 1, f"{what}: {[s.name for s in found]}"
    return found[0]


def _chat(spans: dict[int, ReadableSpan], job: ReadableSpan, purpose: str) -> ReadableSpan:
    return _the(
        _under(spans, job), f"the {purpose} call",
        lambda s: s.name == f"chat {LOCAL_MODEL}"
        and (s.attributes or {}).get("driftless.llm.purpose") == purpose,
    )  # fmt: skip


def test_44_a_close_and_its_summary_are_one_trace_from_the_request_to_the_model_call(
    traced: Traced,
) -> None:
    auth = traced.new_org()
    client = traced.client
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "Ship the beta on Friday")
    topic_id = session["activeTopicId"]
    assert (
        client.post(f"/agents-api/sessions/{session['id']}/topics", headers=auth).status_code == 201
    )

    job = _model_job(traced, SUMMARIZE_TOPIC, topic_id)
    spans = _trace(traced, job.context.trace_id)
    chain = _ancestors(job, spans)
    # The root is the request that closed the topic, named by its route, with its org.
    root = chain[-1]
    assert root.kind == SpanKind.SERVER
    assert root.name == "POST /agents-api/sessions/<sid>/topics"
    org = (root.attributes or {})["driftless.org_id"]
    assert uuid.UUID(str(org))
    # The job's parent is the enqueue that pushed it to its org's list after the commit.
    enqueue = chain[0]
    assert enqueue.name == ENQUEUE_SPAN
    assert (enqueue.attributes or {})["driftless.job.via"] == "ring"
    assert (enqueue.attributes or {})["driftless.job.task"] == SUMMARIZE_TOPIC
    assert any(s.name == "apply_async/driftless.next_model_job" for s in _under(spans, enqueue))
    # The job: its org, its lane, and its wait in the ring; linked to the ticket that popped it.
    attributes = job.attributes or {}
    assert attributes["driftless.org_id"] == org
    assert attributes["driftless.job.lane"] == "live"
    assert attributes["driftless.job.outcome"]
    assert float(attributes["driftless.fair.wait_ms"]) >= 0  # type: ignore[arg-type]
    ticket = {s.context.span_id: s for s in traced.spans()}[job.links[0].context.span_id]
    assert ticket.name == "run/driftless.next_model_job"
    # The model call, in OpenTelemetry's GenAI conventions.
    chat = _chat(spans, job, "summarize")
    call = chat.attributes or {}
    assert chat.kind == SpanKind.CLIENT
    assert call["gen_ai.operation.name"] == "chat"
    assert call["gen_ai.request.model"] == call["gen_ai.response.model"] == LOCAL_MODEL
    assert int(call["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
    assert int(call["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
    assert call["driftless.org_id"] == org
    # SQL statements and Redis commands, the web's and the worker's, in the same trace.
    for side in (root, job):
        below = _under(spans, side)
        assert any((s.attributes or {}).get("db.system") == "postgresql" for s in below), side.name
        assert any((s.attributes or {}).get("db.system") == "redis" for s in below), side.name
    # None failed, but a script's first EVALSHA, which redis-py answers with its EVAL.
    errors = [
        (s.name, s.status.description) for s in spans.values()
        if s.status.status_code == StatusCode.ERROR
        and "NoScriptError" not in (s.status.description or "")
    ]  # fmt: skip
    assert not errors


def test_44_an_exit_trigger_its_debounce_and_its_evaluation_are_one_trace(
    traced: Traced,
) -> None:
    """The trigger waits out its debounce in the broker (a countdown), the evaluation in
    its org's list: the trace follows it through both."""
    auth = traced.new_org()
    client = traced.client
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "We decided to ship on Friday.")
    answer = client.post(
        f"/agents-api/sessions/{session['id']}/evaluate", json={"trigger": "manual"}, headers=auth
    )
    assert answer.status_code == 202 and answer.json["status"] == "scheduled"

    job = _model_job(traced, EVALUATE_TOPIC, session["activeTopicId"])
    spans = _trace(traced, job.context.trace_id)
    names = [s.name for s in _ancestors(job, spans)]
    assert names[-1] == "POST /agents-api/sessions/<sid>/evaluate"
    assert "run/driftless.fire_debounce" in names
    _chat(spans, job, "detect_drift")


def test_44_a_webhook_delivery_sends_traceparent_of_the_request_that_caused_it(
    traced: Traced,
) -> None:
    auth = traced.new_org()
    with Receiver() as receiver:
        answer: Any = traced.client.post(
            "/agents-api/webhooks", headers=auth,
            json={"url": receiver.url + "/hook", "events": ["facts.changed"]},
        )  # fmt: skip
        assert answer.status_code == 201, answer.json
        receiver.secret = answer.json["secret"]
        changed = traced.client.put(f"/agents-api/facts?{SCOPE}", headers=auth, json={"tz": "UTC"})
        assert changed.status_code == 200
        delivery = wait_for(lambda: receiver.requests, timeout=60, what="the delivery")[0]
    version, trace_id, span_id, _flags = delivery.headers["traceparent"].split("-")
    assert version == "00"
    spans = _trace(traced, int(trace_id, 16))
    post = wait_for(lambda: _trace(traced, int(trace_id, 16)).get(int(span_id, 16)),
                    what="the delivery's HTTP span")  # fmt: skip
    spans = _trace(traced, int(trace_id, 16))
    assert post.kind == SpanKind.CLIENT and post.name == "POST"
    # Only the receiver's origin: a webhook's path or query may be its secret.
    assert (post.attributes or {}).get("url.full", receiver.url) == receiver.url.rstrip("/")
    names = [s.name for s in _ancestors(post, spans)]
    assert "run/driftless.deliver_webhook" in names
    assert names[-1] == "PUT /agents-api/facts"


def test_44_no_span_holds_what_was_posted_a_summary_or_a_key(traced: Traced) -> None:
    """Every span exported while a turn runs end to end (a post with a name, a search, a
    fact, a close and its summary), serialized whole: name, attributes, events, links and
    resource. Ids, counts and model names only."""
    traced.exporter.clear()
    key = traced.new_org()
    client = traced.client
    words = "Quillwort marzipan teleport"
    session = new_session(client, key)
    sent = client.post(
        f"/agents-api/sessions/{session['id']}/messages", headers=key,
        json={"role": "user", "content": f"{words} on Thursday", "name": "Zebulon_Quince"},
    )  # fmt: skip
    assert sent.status_code == 201, sent.json
    found = client.get(f"/agents-api/search?{SCOPE}&q=Quillwort", headers=key)
    assert found.status_code == 200 and found.json["results"], found.json
    fact = client.put(f"/agents-api/facts?{SCOPE}", headers=key, json={"pet": "Axolotlbert"})
    assert fact.status_code == 200
    topic_id = session["activeTopicId"]
    assert (
        client.post(f"/agents-api/sessions/{session['id']}/topics", headers=key).status_code == 201
    )
    summary = wait_for(
        lambda: client.get(f"/agents-api/topics/{topic_id}", headers=key).json["summary"],
        what="the summary",
    )
    assert "Quillwort" in summary  # the local model's summary quotes the message
    _model_job(traced, SUMMARIZE_TOPIC, topic_id)

    exported = [span.to_json() for span in traced.spans()]
    assert len(exported) > 20  # requests, statements, commands, tasks, the call
    token = key["Authorization"].removeprefix("Bearer ")
    for secret in ("Quillwort", "marzipan", "Zebulon_Quince", "Axolotlbert", token, summary):
        leaks = [json.loads(s)["name"] for s in exported if secret in s]
        assert not leaks, f"{secret!r} is in spans {leaks}"


def test_44_a_job_sent_back_after_a_database_blip_stays_in_its_trace(traced: Traced) -> None:
    """The job's span has ended when it is sent back to the broker to wait out the blip:
    the resend is still the request's (the bulk lane: no ticket of another test pops it)."""
    runtime = traced.celery.driftless
    topic_id = str(uuid.uuid4())
    with tracing.tracer.start_as_current_span("a request") as request:
        job = FairJob(SUMMARIZE_TOPIC, {"topic_id": topic_id, "trigger": "close"}, "org-blip",
                      trace=tracing.carrier())  # fmt: skip
    runtime.fair.push("bulk", job)

    def blip(_app: Any, **_kwargs: Any) -> str:
        raise OperationalError("SELECT 1", {}, Exception("the server closed the connection"))

    ticket = SimpleNamespace(app=traced.celery, request=SimpleNamespace(id=None))
    outcome = serve_next(ticket, "bulk", {SUMMARIZE_TOPIC: blip}, on_failure=lambda _job: None)  # type: ignore[arg-type]

    assert outcome == "retry"
    spans = _trace(traced, request.get_span_context().trace_id)
    resend = _the(
        list(spans.values()), "the resend",
        lambda s: s.name == ENQUEUE_SPAN
        and (s.attributes or {}).get("driftless.job.via") == "broker",
    )  # fmt: skip
    assert (resend.attributes or {})["driftless.job.countdown_s"] == RETRY_AFTER_S
    job_span = _the(list(spans.values()), "the job", lambda s: s.name == MODEL_JOB_SPAN)
    assert job_span.status.status_code == StatusCode.ERROR
    assert (job_span.attributes or {})["error.type"] == "OperationalError"


def test_44_probes_and_scrapes_are_not_traced_and_other_requests_are(traced: Traced) -> None:
    traced.exporter.clear()
    for path in ("/healthz", "/readyz", "/metrics", "/agents-api/openapi.json"):
        assert traced.client.get(path).status_code in (200, 503), path
    servers = [s.name for s in traced.spans() if s.kind == SpanKind.SERVER]
    assert servers == ["GET /agents-api/openapi.json"]
