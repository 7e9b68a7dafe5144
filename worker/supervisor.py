"""`driftless up`: web, worker and beat in one process tree, on embedded servers by default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import click

from shared.auth.service import create_api_key, org_for_key
from shared.config import Settings
from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import upgrade
from shared.db.uow import UnitOfWork
from shared.queue import RecordingQueue

STOP_GRACE_S = 15
DEV_ORG = "dev"


def _dev_key(database_url: str, home: Path) -> str:
    """The dev key kept in `home/dev-key`, re-created if the database no longer knows it."""
    key_file = home / "dev-key"
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with UnitOfWork(make_session_factory(engine), RecordingQueue()) as uow:
            if key_file.exists():
                key = key_file.read_text().strip()
                if org_for_key(uow=uow, key=key) is not None:
                    return key
            key = create_api_key(uow=uow, org_name=DEV_ORG)
            uow.commit()
    finally:
        engine.dispose()
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    return key


def _commands(settings: Settings) -> dict[str, list[str]]:
    bin_dir = Path(sys.executable).parent
    return {
        "web": [
            str(bin_dir / "gunicorn"), "--bind", f"127.0.0.1:{settings.port}",
            "--workers", "2", "--threads", "4", "web.app:create_app()",
        ],
        "worker": [
            # One process for both queues on a laptop; the threads pool is the measured
            # choice for LLM-bound work (README, "Benchmarks", P4).
            str(bin_dir / "celery"), "-A", "worker.main", "worker", "--queues", "llm,fast",
            "--pool", "threads", "--concurrency", "16", "--loglevel", "INFO",
        ],
        "beat": [
            str(bin_dir / "celery"), "-A", "worker.main", "beat", "--loglevel", "INFO",
            "--schedule", str(settings.home.resolve() / "celerybeat-schedule"),
        ],
    }  # fmt: skip


def _stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()


def run_system(settings: Settings) -> int:
    """Run until Ctrl-C (or SIGTERM, or any child dying); returns the exit status."""
    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    with ExitStack() as cleanup:
        database_url, redis_url = settings.database_url, settings.redis_url
        if database_url is None:
            from shared.embedded import start_postgres

            postgres = start_postgres(home, stop_with_caller=True)
            cleanup.callback(postgres.stop)
            database_url = postgres.url
        if redis_url is None:
            from shared.embedded import start_redis

            embedded_redis = start_redis(home)
            cleanup.callback(embedded_redis.stop)
            redis_url = embedded_redis.url
        upgrade(database_url)
        key = _dev_key(database_url, home)

        env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
        env.setdefault("CELERY_BROKER_URL", settings.broker_url or redis_url)
        env.setdefault("LOG_FORMAT", "text")  # a person reads this terminal; JSON is for shippers
        processes = {
            name: subprocess.Popen(command, env=env)
            for name, command in _commands(settings).items()
        }
        cleanup.callback(_stop, processes)

        stopping = False

        def _on_signal(signum: int, _frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
        click.echo(f"driftless is up: http://127.0.0.1:{settings.port}  (console: /console)")
        click.echo(f"database: {database_url}")
        click.echo(f"redis:    {redis_url}")
        click.echo("dev API key (Authorization: Bearer <key>):")
        click.echo(key)
        while not stopping:
            for name, process in processes.items():
                if process.poll() is not None:
                    click.echo(
                        f"driftless: {name} exited with {process.returncode}; stopping", err=True
                    )
                    return 1
            time.sleep(0.5)
        click.echo("driftless: stopping…")
    return 0
