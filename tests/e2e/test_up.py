"""`driftless up` brings web, worker and beat up together and Ctrl-C stops them all."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.up import DRIFTLESS, STOPPED_WITHIN_S, stop_up, up_environment
from tests.faults.procs import free_port
from tests.helpers import wait_for


def _get(url: str, key: str | None = None) -> dict[str, object]:
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=5) as response:
        body: dict[str, object] = json.loads(response.read())
        return body


@pytest.fixture
def up_process(database_url: str, redis_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    port = free_port()
    env = up_environment(database_url=database_url, redis_url=redis_url, home=tmp_path, port=port)
    process = subprocess.Popen(
        [DRIFTLESS, "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    yield process, port
    stop_up(process, signal.SIGTERM)
    assert process.stdout is not None
    process.stdout.close()


def _banner(process: subprocess.Popen[str]) -> list[str]:
    """What `up` prints up to the dev key, its last line."""
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line.strip())
        if line.startswith("dl_"):
            break
    return lines


def test_up_serves_and_stops_cleanly_on_ctrl_c(up_process) -> None:  # type: ignore[no-untyped-def]
    process, port = up_process
    lines = _banner(process)
    key = lines[-1]
    assert any(f"http://127.0.0.1:{port}" in line for line in lines)

    base = f"http://127.0.0.1:{port}"

    def ready() -> dict[str, object] | None:
        try:
            return _get(f"{base}/readyz")
        except OSError:
            return None

    assert wait_for(ready, what="the web process")["status"] == "ok"
    created = urllib.request.Request(
        f"{base}/agents-api/sessions",
        data=b'{"agentId": "a", "userId": "u"}',
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(created, timeout=5) as response:
        assert response.status == 201  # the printed dev key works

    children = psutil.Process(process.pid).children(recursive=True)
    names = " ".join(" ".join(child.cmdline()) for child in children)
    assert "gunicorn" in names and " worker " in names and " beat " in names

    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    assert not [child for child in children if child.is_running() and child.status() != "zombie"]


def _serving_worker(workers: list[psutil.Process], client_port: int) -> int:
    """The gunicorn worker holding the server side of the client's connection."""
    for worker in workers:
        for connection in worker.net_connections(kind="tcp"):
            if connection.raddr and connection.raddr.port == client_port:
                return worker.pid
    raise AssertionError(f"no gunicorn worker holds the connection from port {client_port}")


def _healthz_served_by(port: int, workers: list[psutil.Process]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        assert response.status == 200
        assert connection.sock is not None  # kept alive: the server side is still open
        return _serving_worker(workers, connection.sock.getsockname()[1])
    finally:
        connection.close()


def test_up_metrics_count_the_requests_of_both_web_processes(up_process) -> None:  # type: ignore[no-untyped-def]
    process, port = up_process
    _banner(process)
    supervisor = psutil.Process(process.pid)
    master = next(p for p in supervisor.children() if "gunicorn" in " ".join(p.cmdline()))
    workers = wait_for(
        lambda: master.children() if len(master.children()) == 2 else None,
        what="both gunicorn workers",
    )
    web_dir = master.environ()["PROMETHEUS_MULTIPROC_DIR"]
    assert {w.environ()["PROMETHEUS_MULTIPROC_DIR"] for w in workers} == {web_dir}
    others = [p for p in supervisor.children() if p.pid != master.pid]
    assert not [p for p in others if "PROMETHEUS_MULTIPROC_DIR" in p.environ()]  # their own

    # At least 2 each: `up`'s own readiness probe is 1 request one process counted, so a
    # scrape of that process alone stays below the total.
    served = {worker.pid: 0 for worker in workers}
    deadline = time.monotonic() + 30
    while sum(served.values()) < 40 or min(served.values()) < 2:
        assert time.monotonic() < deadline, f"requests per gunicorn worker: {served}"
        served[_healthz_served_by(port, workers)] += 1

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        exposition = response.read().decode()
    counted = sum(
        sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == "driftless_http_requests_total"
        and sample.labels.get("route") == "/healthz"
    )
    assert counted >= sum(served.values()), served

    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=STOPPED_WITHIN_S) == 0
    assert not Path(web_dir).exists()  # removed on stop
