"""bench/otlp_sink ([4.4]): the smallest OTLP/HTTP receiver, for measuring what traces cost.

A traced web under a bench needs somewhere to send its spans, and that somewhere must not
be what is measured: this sink answers 200 to every `POST /v1/traces` and keeps count of
the requests, their bytes and the spans in them by name (decoded, so a bench can see
which spans a request makes and whether the batch processor dropped any). It runs as a
process of its own (bench/post_path.py starts it), so its CPU is never counted as the
web's. `GET /stats` answers the counts as JSON.

    .venv/bin/python -m bench.otlp_sink --port 4318
"""

from __future__ import annotations

import argparse
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

# An empty ExportTraceServiceResponse: what a collector answers when it took every span.
_ACCEPTED = ExportTraceServiceResponse().SerializeToString()


class Counts:
    """What the sink has received so far (its handler threads add to it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0
        self.spans = 0
        self.names: Counter[str] = Counter()

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        names = [
            span.name
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]
        with self.lock:
            self.requests += 1
            self.bytes += len(body)
            self.spans += len(names)
            self.names.update(names)

    def as_json(self) -> bytes:
        with self.lock:
            counts = {"requests": self.requests, "bytes": self.bytes, "spans": self.spans}
            return json.dumps({**counts, "names": dict(self.names.most_common())}).encode()


def handler_for(counts: Counts) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's session expects

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self._answer(404, b"")
                return
            counts.add(body)
            self._answer(200, _ACCEPTED, "application/x-protobuf")

        def do_GET(self) -> None:
            if self.path == "/stats":
                self._answer(200, counts.as_json(), "application/json")
            else:
                self._answer(404, b"")

        def _answer(self, status: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a line per export would be the sink's main cost

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(Counts()))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
