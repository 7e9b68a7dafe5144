"""`driftless up` as the tests start and stop it: its environment and its stop."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import services
from worker.supervisor import KILL_WAIT_S, STOP_GRACE_S

DRIFTLESS = str(Path(sys.executable).parent / "driftless")
# Its own broker database, apart from the session worker's (Redis has 16, 0-15).
UP_BROKER_REDIS_DB = (services.DATA_REDIS_DB - 3) % 16
STOPPED_WITHIN_S = STOP_GRACE_S + KILL_WAIT_S + 10


def up_environment(
    *, database_url: str, redis_url: str, home: Path, port: int, own_broker: bool = True
) -> dict[str, str]:
    """The test's servers, a free port and a home of its own. Without `own_broker` the
    broker is REDIS_URL's database and the process's settings are left unset, as under
    `make run`."""
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if own_broker:
        env["CELERY_BROKER_URL"] = f"{services.redis_base_url()}/{UP_BROKER_REDIS_DB}"
    else:
        for name in [n for n in env if n.startswith(("OPENAI_", "CELERY_", "LOG_"))]:
            del env[name]
    env.update(
        PORT=str(port),
        DRIFTLESS_HOME=str(home),
        DRIFTLESS_WORKER_METRICS_PORT="0",  # 9808 may be a running system's
    )
    return env


def stop_up(process: subprocess.Popen[str] | subprocess.Popen[bytes], sig: int) -> None:
    """Stop it with `sig` unless it has stopped; SIGKILL if it outlives the supervisor's
    own grace (the supervisor still stops its tree on a failed test)."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout=STOPPED_WITHIN_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def embedded_environment(*, home: Path, port: int) -> dict[str, str]:
    """As `make run` on a fresh clone: no URL of any server, so `up` starts (or joins) the
    embedded PostgreSQL and Redis under `home`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")
        and not name.startswith(("OPENAI_", "CELERY_", "LOG_"))
    }
    env.update(PORT=str(port), DRIFTLESS_HOME=str(home), DRIFTLESS_WORKER_METRICS_PORT="0")
    return env
