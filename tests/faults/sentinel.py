"""A Redis primary, its replica and three sentinels of a test's own (no persistence), to
kill the primary of and watch Sentinel promote the replica."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests.faults.procs import Child, Processes, free_port, wait_until

MASTER = "driftless"
SENTINELS = 3
# Quick enough for a test's patience: the primary is deemed down after 1 s of silence.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


def machine_redis_server() -> str:
    """The machine's redis-server (it doubles as a sentinel), or the test is skipped."""
    found = shutil.which("redis-server")
    if found is None:
        pytest.skip("no redis-server on PATH: the Sentinel failover test needs one")
    return found


@dataclass
class SentinelCluster:
    processes: Processes
    binary: str
    primary_port: int = field(default_factory=free_port)
    replica_port: int = field(default_factory=free_port)
    sentinel_ports: list[int] = field(
        default_factory=lambda: [free_port() for _ in range(SENTINELS)]
    )
    primary: Child | None = None

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER}/0"

    def start(self) -> SentinelCluster:
        self.primary = self._server("redis-primary", self.primary_port)
        self._server(
            "redis-replica", self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port)
        )
        wait_until(self._replica_in_sync, timeout=10, what="the replica in sync with the primary")
        for n, port in enumerate(self.sentinel_ports):
            self._sentinel(n, port)
        wait_until(
            self._sentinels_ready,
            timeout=15,
            what="three sentinels that know the replica and each other",
        )
        return self

    def kill_primary(self) -> None:
        assert self.primary is not None
        self.primary.kill()  # SIGKILL to its process group

    def master_port(self) -> int | None:
        """The primary's port as the first sentinel tells it."""
        try:
            address = self._client(self.sentinel_ports[0]).sentinel_get_master_addr_by_name(MASTER)
        except redis.RedisError:
            return None
        return int(address[1]) if address else None

    def _server(self, name: str, port: int, *extra: str) -> Child:
        argv = [
            self.binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.processes.directory), *extra,
        ]  # fmt: skip
        child = self.processes.spawn(name, argv, {"PATH": os.environ.get("PATH", "")})
        wait_until(lambda: self._answers(port), timeout=10, what=f"{name} on port {port}")
        return child

    def _sentinel(self, n: int, port: int) -> None:
        # A sentinel rewrites its configuration file: each has its own.
        config = Path(self.processes.directory) / f"sentinel-{n}.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.processes.directory}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        argv = [self.binary, str(config), "--sentinel"]
        self.processes.spawn(f"sentinel-{n}", argv, {"PATH": os.environ.get("PATH", "")})
        wait_until(lambda: self._answers(port), timeout=10, what=f"sentinel {n} on port {port}")

    def _replica_in_sync(self) -> bool:
        info = self._client(self.replica_port).info("replication")
        return bool(info.get("master_link_status") == "up")

    def _sentinels_ready(self) -> bool:
        for port in self.sentinel_ports:
            client = self._client(port)
            if (
                len(client.sentinel_slaves(MASTER)) < 1
                or len(client.sentinel_sentinels(MASTER)) < SENTINELS - 1
            ):
                return False
        return True

    def _answers(self, port: int) -> bool:
        try:
            return bool(self._client(port).ping())
        except redis.RedisError:
            return False

    @staticmethod
    def _client(port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, decode_responses=True)
