"""`driftless up`: web, worker and beat in one process tree, on embedded servers by default.

Each child leads a session and process group of its own: a signal to the group reaches
what the child forked (gunicorn's workers), and a terminal's Ctrl-C reaches only this
supervisor, which stops the groups in order. When Ctrl-C reached every process at once,
a gunicorn worker could get SIGINT and its master's SIGQUIT back to back and deadlock in
the second handler, then outlive its master holding the port.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import click

from shared.auth.service import create_api_key, org_for_key
from shared.bootstrap import Runtime
from shared.infra.config import Settings
from shared.infra.db.migrate import upgrade
from shared.infra.embedded import (
    DEV_SECRET_KEY_FILE,
    EmbeddedPostgres,
    EmbeddedRedis,
    dev_secret_key,
    owner_of,
    start_postgres,
    start_redis,
)
from shared.infra.logs import LogFormat, configure_logging
from shared.infra.queue import QUEUES
from shared.infra.runtime import Endpoints
from shared.infra.sealing import VARIABLE
from worker.multiproc import PRIVATE_DIR_PREFIX, remove_orphaned_dirs

STOP_GRACE_S = 10.0  # from SIGTERM to SIGKILL; work cut short is redelivered (acks_late)
GRACEFUL_TIMEOUT_S = int(STOP_GRACE_S) - 2  # the web's, for its requests in flight
KILL_WAIT_S = 5.0  # after SIGKILL, for the kernel to tear the processes down
START_TIMEOUT_S = 60.0  # for the web to answer /healthz
POLL_S = 0.1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEV_ORG = "dev"
EmbeddedServer = EmbeddedPostgres | EmbeddedRedis
# A PYTHONWARNINGS filter: the start of Celery's SecurityWarning (celery/platforms.py).
CELERY_ROOT_WARNING = "ignore:You're running the worker with superuser privileges"


def _dev_key(runtime: Runtime, home: Path) -> str:
    """The dev key kept in `home/dev-key`, re-created if the database no longer knows it."""
    key_file = home / "dev-key"
    with runtime.unit_of_work() as uow:
        if key_file.exists():
            key = key_file.read_text().strip()
            if org_for_key(uow=uow, key=key) is not None:
                return key
        key = create_api_key(uow=uow, org_name=DEV_ORG)
        uow.commit()
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    return key


def sealing_env(settings: Settings) -> dict[str, str]:
    """What the children get to seal stored secrets with: nothing when the operator set
    keys (they inherit them), else the dev key kept under the home directory, made the
    first time, so that the next `make run` opens what this one sealed."""
    if settings.secret_keys is not None or settings.webhook_keys is not None:
        return {}
    return {VARIABLE: dev_secret_key(settings.home)}


def _log_format(settings: Settings) -> LogFormat:
    """LOG_FORMAT when it is set, else text: a person reads this terminal (JSON is for log
    shippers). The same for every process, this one included."""
    return settings.log_format if os.environ.get("LOG_FORMAT", "").strip() else "text"


def _commands(settings: Settings) -> dict[str, list[str]]:
    bin_dir = Path(sys.executable).parent
    return {
        "web": [
            # No control socket: nothing here uses it, and gunicorn's default path
            # (~/.gunicorn/gunicorn.ctl) is one per user, taken over by each system started.
            str(bin_dir / "gunicorn"), "--bind", f"127.0.0.1:{settings.port}",
            "--workers", "2", "--worker-class", "web.server.FairGeventWorker",
            "--worker-connections", "1000",
            # As the Procfile's, which says why: every valid id fits a request line.
            "--limit-request-line", "8190",
            # Requests still running when a stop begins get this long, inside the
            # supervisor's own grace before SIGKILL (gunicorn's default is 30 s).
            "--graceful-timeout", str(GRACEFUL_TIMEOUT_S),
            "--no-control-socket", "web.app:create_app()",
        ],
        # --quiet: no Celery banner (its broker, queues and tasks); the supervisor's own
        # says where everything is, and Celery's pushed it out of sight.
        "worker": [
            # One process for every queue on a laptop, as the Procfile's worker: gevent
            # is the measured choice for LLM-bound work (docs/benchmarks.md, P4).
            str(bin_dir / "celery"), "-A", "worker.main", "--quiet", "worker",
            "--queues", ",".join(QUEUES),
            "--pool", "gevent", "--concurrency", "128", "--loglevel", "INFO",
        ],
        "beat": [
            str(bin_dir / "celery"), "-A", "worker.main", "--quiet", "beat",
            "--loglevel", "INFO",
            "--schedule", str(settings.home.resolve() / "celerybeat-schedule"),
        ],
    }  # fmt: skip


@dataclass
class ProcessGroup:
    """A child started as the leader of a new session and process group (pgid = its pid)."""

    name: str
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, name: str, argv: list[str], env: Mapping[str, str]) -> ProcessGroup:
        process = subprocess.Popen(
            argv, env=dict(env), stdin=subprocess.DEVNULL, start_new_session=True
        )
        return cls(name, process)

    def exited(self) -> int | None:
        """The leader's exit status, or None while it runs."""
        return self.process.poll()

    def alive(self) -> bool:
        """Whether any member is left; the leader's pid names the group even after it exits."""
        self.process.poll()  # reap the leader: its zombie would keep the group alive
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # a member that changed user is still a member
            return True
        return True

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


def stop_groups(groups: list[ProcessGroup], *, grace_s: float = STOP_GRACE_S) -> list[str]:
    """SIGTERM every group, then SIGKILL those with members left after `grace_s`.

    The whole group, not just the leader: a member can outlive its leader (a gunicorn
    worker whose master died), and only a signal to the group reaches it then.
    Returns the names of the groups that had to be killed.
    """
    for group in groups:
        group.signal(signal.SIGTERM)
    _wait_until_gone(groups, grace_s)
    stubborn = [group for group in groups if group.alive()]
    for group in stubborn:
        group.signal(signal.SIGKILL)
    _wait_until_gone(stubborn, KILL_WAIT_S)
    return [group.name for group in stubborn]


def _wait_until_gone(groups: list[ProcessGroup], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(group.alive() for group in groups) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _stop_and_say(groups: list[ProcessGroup]) -> None:
    for name in stop_groups(groups):
        click.echo(f"driftless: {name} did not stop within {STOP_GRACE_S:g} s; killed", err=True)


class _StopSignals:
    """Turns Ctrl-C, SIGTERM and SIGHUP into a flag the supervisor's loop polls."""

    def __init__(self, cleanup: ExitStack) -> None:
        self.received: int | None = None
        for signum in STOP_SIGNALS:
            previous = signal.signal(signum, self._handle)
            cleanup.callback(
                signal.signal, signum, signal.SIG_DFL if previous is None else previous
            )

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received = signum


def _port_taken(port: int) -> bool:
    """Whether something listens on 127.0.0.1:port (the bind gunicorn is about to try)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _web_answers(port: int) -> bool:
    # http.client, not urllib: urllib would send 127.0.0.1 through an HTTP_PROXY.
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _web_metrics_dir(cleanup: ExitStack) -> str:
    """The operator's PROMETHEUS_MULTIPROC_DIR, else a fresh one removed on stop.

    Named like the worker's private directories, so that a worker started after this
    supervisor was killed with `kill -9` removes it (worker.multiproc).
    """
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return os.environ["PROMETHEUS_MULTIPROC_DIR"]
    remove_orphaned_dirs()
    path = tempfile.mkdtemp(prefix=f"{PRIVATE_DIR_PREFIX}{os.getpid()}-")
    cleanup.callback(shutil.rmtree, path, ignore_errors=True)
    return path


def _environments(base: Mapping[str, str], web_metrics_dir: str) -> dict[str, dict[str, str]]:
    """Each child's environment: the web's processes share one metrics directory.

    The worker and beat do not get it: worker/main.py makes each its own, and a shared one
    would make the web's /metrics and the worker's count each other's samples.
    """
    others = {k: v for k, v in base.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    # Celery warns a worker run as root, for a fleet's sake (deploy/ runs workers as a
    # user of their own); a container's `make run` is root, and the warning was noise.
    warnings = ",".join(filter(None, (base.get("PYTHONWARNINGS"), CELERY_ROOT_WARNING)))
    return {
        "web": {**others, "PROMETHEUS_MULTIPROC_DIR": web_metrics_dir},
        "worker": {**others, "PYTHONWARNINGS": warnings},
        "beat": others,
    }


def _first_exit(groups: list[ProcessGroup]) -> str | None:
    for group in groups:
        status = group.exited()
        if status is not None:
            return f"{group.name} exited with {status}"
    return None


def _wait_for_web(groups: list[ProcessGroup], port: int, stop: _StopSignals) -> str | None:
    """None once GET /healthz answers 200; else why not (a stop signal leaves it None)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while stop.received is None:
        exited = _first_exit(groups)
        if exited:
            return f"{exited} before /healthz answered"
        if _web_answers(port):
            return None
        if time.monotonic() > deadline:
            return f"the web did not answer /healthz within {START_TIMEOUT_S:g} s"
        time.sleep(POLL_S)
    return None


def _servers(settings: Settings, cleanup: ExitStack) -> tuple[str, str, list[str]]:
    """The database and Redis URLs: the configured ones, else the embedded servers',
    started or joined, each stopped on exit only if this process owns it (a server
    another `up` owns is left running for it); and a note for each one joined."""
    joined: list[str] = []

    def embedded(name: str, key: str, start: Callable[..., EmbeddedServer]) -> str:
        server = start(settings.home, stop_with_caller=True)
        cleanup.callback(server.stop)
        if server.owner is None:
            owner = owner_of(settings.home, key)
            joined.append(f"joined the embedded {name} of process {owner}: it stops with that one")
        return server.url

    database_url = settings.database_url or embedded("PostgreSQL", "postgres", start_postgres)
    redis_url = settings.redis_url or embedded("Redis", "redis", start_redis)
    return database_url, redis_url, joined


def run_system(settings: Settings) -> int:
    """Run until Ctrl-C (or SIGTERM, SIGHUP, or any child dying); returns the exit status."""
    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    log_format = _log_format(settings)
    configure_logging(log_format)  # the CLI chose JSON, the default, when LOG_FORMAT is unset
    if _port_taken(settings.port):
        click.echo(
            f"driftless: port {settings.port} is in use (another `driftless up`?); "
            "stop it or set PORT",
            err=True,
        )
        return 1
    # Callbacks run last-registered first: children stop before their metrics directory
    # goes and before the embedded servers they use.
    with ExitStack() as cleanup:
        database_url, redis_url, joined = _servers(settings, cleanup)
        upgrade(database_url)
        endpoints = Endpoints(database_url, redis_url, settings.broker_url or redis_url)
        runtime = Runtime(settings, endpoints=endpoints, pool_size=1, max_overflow=0)
        try:
            key = _dev_key(runtime, home)
        finally:
            runtime.close()

        env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
        env.setdefault("CELERY_BROKER_URL", settings.broker_url or redis_url)
        env["LOG_FORMAT"] = log_format
        sealing = sealing_env(settings)
        env.update(sealing)
        environments = _environments(env, _web_metrics_dir(cleanup))

        stop = _StopSignals(cleanup)
        groups: list[ProcessGroup] = []
        cleanup.callback(_stop_and_say, groups)  # before starting: a failed start stops the rest
        for name, command in _commands(settings).items():
            groups.append(ProcessGroup.start(name, command, environments[name]))

        failure = _wait_for_web(groups, settings.port, stop)
        if failure:
            click.echo(f"driftless: {failure}; stopping", err=True)
            return 1
        if stop.received is None:
            click.echo(f"driftless is up: http://127.0.0.1:{settings.port}  (console: /console)")
            click.echo(f"database: {database_url}")
            click.echo(f"redis:    {redis_url}")
            for note in joined:
                click.echo(note)
            click.echo(f"dev key file: {(home / 'dev-key').resolve()}")
            if VARIABLE in sealing:
                click.echo(f"secrets sealed with: {(home / DEV_SECRET_KEY_FILE).resolve()}")
            click.echo("dev API key (Authorization: Bearer <key>):")
            click.echo(key)
        while stop.received is None:
            exited = _first_exit(groups)
            if exited:
                click.echo(f"driftless: {exited}; stopping", err=True)
                return 1
            time.sleep(POLL_S)
        click.echo("driftless: stopping…")
    return 0
