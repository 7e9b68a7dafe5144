"""An OTLP trace receiver for tests: what a collector would get from the real processes.

Two front doors to one store of spans, as a collector has:
- `HttpReceiver`: an http.server on 127.0.0.1 that takes POST /v1/traces, a protobuf
  ExportTraceServiceRequest, gzip- or deflate-compressed when its Content-Encoding says so
  (OTEL_EXPORTER_OTLP_COMPRESSION);
- `GrpcReceiver`: grpcio's server with the collector's TraceService.

Each span is kept with what a test asks of a trace: its process's service.name (and the
rest of its resource), its name, kind, ids, parent, attributes and links.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

TRACES_PATH = "/v1/traces"
HOLD_LIMIT_S = 120.0  # a held export is answered at the latest after this


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    kind: int  # the protobuf's SpanKind: 2 server, 3 client, 4 producer, 5 consumer
    trace_id: int
    span_id: int
    parent_span_id: int | None
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: tuple[tuple[int, int], ...]  # (trace id, span id) of each


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _id(raw: bytes) -> int | None:
    return int.from_bytes(raw, "big") if raw else None


def spans_of(request: trace_service_pb2.ExportTraceServiceRequest) -> list[Span]:
    """Every span of one export, with its process's resource."""
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        service=str(resource.get("service.name")),
                        name=span.name,
                        kind=span.kind,
                        trace_id=_id(span.trace_id) or 0,
                        span_id=_id(span.span_id) or 0,
                        parent_span_id=_id(span.parent_span_id),
                        attributes=_attributes(span.attributes),
                        resource=resource,
                        links=tuple(
                            (_id(link.trace_id) or 0, _id(link.span_id) or 0) for link in span.links
                        ),
                    )
                )
    return spans


@dataclass
class Received:
    """The spans of every export so far (thread-safe), and how many exports brought them."""

    exports: int = 0
    _spans: list[Span] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        spans = spans_of(request)
        with self._lock:
            self.exports += 1
            self._spans.extend(spans)

    def spans(self, test: Callable[[Span], bool] = lambda _: True) -> list[Span]:
        with self._lock:
            spans = list(self._spans)
        return [s for s in spans if test(s)]  # unlocked: `test` may ask for spans itself

    def services(self) -> set[str]:
        return {s.service for s in self.spans()}

    def trace(self, trace_id: int) -> list[Span]:
        return self.spans(lambda s: s.trace_id == trace_id)


def _decompress(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    if encoding in ("", "identity"):
        return body
    raise ValueError(f"Content-Encoding {encoding!r}")


class HttpReceiver(Received):
    """OTLP/HTTP (protobuf): `with HttpReceiver() as receiver:`; `endpoint` is the base URL
    an exporter's OTEL_EXPORTER_OTLP_ENDPOINT takes (it appends /v1/traces itself)."""

    encodings: list[str]

    def __enter__(self) -> HttpReceiver:
        receiver = self
        self.encodings = []  # each export's Content-Encoding, "" when none

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                encoding = self.headers.get("content-encoding", "").strip().lower()
                if self.path != TRACES_PATH:
                    self._answer(404)
                    return
                request = trace_service_pb2.ExportTraceServiceRequest()
                try:
                    request.ParseFromString(_decompress(body, encoding))
                except (ValueError, OSError, zlib.error) as exc:
                    self._answer(400, str(exc).encode())
                    return
                receiver.encodings.append(encoding)
                receiver.add(request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self._answer(200, reply)

            def _answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: GrpcReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self._receiver.add(request)
        self._receiver._wait_for_release({s.service for s in spans_of(request)})
        return trace_service_pb2.ExportTraceServiceResponse()


class GrpcReceiver(Received):
    """OTLP/gRPC: `with GrpcReceiver() as receiver:`; `endpoint` for an exporter whose
    OTEL_EXPORTER_OTLP_PROTOCOL is grpc (insecure: an http:// endpoint).

    `hold()` keeps each export's call unanswered (its spans are kept at once) until
    `release()`, as a collector that is slow to answer: `held` has the services of each
    export waiting."""

    held: list[set[str]]

    def __enter__(self) -> GrpcReceiver:
        import grpc

        self.held = []
        self._released = threading.Event()
        self._released.set()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), self._server)
        self._port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def holds(self, service: str) -> bool:
        """An export of `service`'s waits for its answer."""
        with self._lock:
            return any(service in services for services in self.held)

    def _wait_for_release(self, services: set[str]) -> None:
        with self._lock:
            self.held.append(services)
        try:
            self._released.wait(timeout=HOLD_LIMIT_S)
        finally:
            with self._lock:
                self.held.remove(services)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.release()
        self._server.stop(grace=None)
