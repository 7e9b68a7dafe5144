"""Prometheus metrics of the web process (`GET /metrics`, no key: scrapers carry none).

Besides the request metrics defined here, the scrape shows what this process counted
elsewhere: jobs it enqueued (worker.metrics, counted by CeleryJobQueue) and domain
events (shared.infra.metrics: debounce outcomes, curation changes).

Under gunicorn with several workers, set PROMETHEUS_MULTIPROC_DIR to a shared empty
directory so a scrape sums every worker process (prometheus-client's multiprocess mode);
without it each process reports its own counts.
"""

from __future__ import annotations

import os
import time

from flask import Flask, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

from shared.infra.metrics_export import multiprocess_registry

REQUESTS = Counter(
    "driftless_http_requests_total", "HTTP requests by route and status", ["route", "status"]
)
LATENCY = Histogram("driftless_http_request_seconds", "HTTP request latency by route", ["route"])


def _exposition() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return generate_latest(multiprocess_registry())
    return generate_latest()


def install_metrics(app: Flask) -> None:
    @app.before_request
    def _start_timer() -> None:
        g.metrics_started = time.perf_counter()

    @app.after_request
    def _observe(response: Response) -> Response:
        route = request.url_rule.rule if request.url_rule else "unmatched"
        REQUESTS.labels(route, str(response.status_code)).inc()
        started = g.get("metrics_started")
        if started is not None:
            LATENCY.labels(route).observe(time.perf_counter() - started)
        return response

    app.add_url_rule(
        "/metrics",
        "metrics",
        lambda: Response(_exposition(), mimetype=CONTENT_TYPE_LATEST),
    )
