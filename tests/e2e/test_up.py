"""`driftless up` brings web, worker and beat up together and Ctrl-C stops them all."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests import services
from tests.helpers import wait_for

UP_BROKER_REDIS_DB = services.DATA_REDIS_DB - 3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _get(url: str, key: str | None = None) -> dict[str, object]:
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=5) as response:
        body: dict[str, object] = json.loads(response.read())
        return body


@pytest.fixture
def up_process(database_url: str, redis_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": f"{services.redis_base_url()}/{UP_BROKER_REDIS_DB}",
        "PORT": str(port),
        "DRIFTLESS_HOME": str(tmp_path),
    }
    driftless = str(Path(sys.executable).parent / "driftless")
    process = subprocess.Popen(
        [driftless, "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    yield process, port
    if process.poll() is None:
        process.kill()
        process.wait()
    assert process.stdout is not None
    process.stdout.close()


def test_up_serves_and_stops_cleanly_on_ctrl_c(up_process) -> None:  # type: ignore[no-untyped-def]
    process, port = up_process
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line.strip())
        if line.startswith("dl_"):
            break
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
