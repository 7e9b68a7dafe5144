"""Connections to an org's model server go only to addresses checked for that connection.

The base URL was checked when the org set it (shared/providers/service.py), but a name
may resolve elsewhere later (DNS rebinding). The openai client's connections therefore go
through `PinnedBackend`: each connect resolves the host once, refuses it unless every
address is public (shared/infra/targets.py's rules, the webhooks' own), and connects to
those addresses, never to a name resolved again. TLS still verifies the name (httpcore
sends it as the SNI), and a redirect to another host is checked the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import httpcore2

from shared.infra.targets import Resolver, UnsafeTarget, pin_host, resolve_system

log = logging.getLogger(__name__)


class PinnedBackend(httpcore2.NetworkBackend):
    """httpcore's own sockets, opened to checked addresses only."""

    def __init__(
        self,
        *,
        allow_private: bool,
        resolve: Resolver = resolve_system,
        backend: httpcore2.NetworkBackend | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._resolve = resolve
        self._backend = backend or httpcore2.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:  # fmt: skip
        try:
            addresses = pin_host(host, allow_private=self._allow_private, resolve=self._resolve)
        except UnsafeTarget as exc:
            # The tenant's error (the evaluation's) names no address; the operator's log does.
            log.warning("model server %s refused: %s", host, exc.detail)
            raise httpcore2.ConnectError(f"refused: {exc}") from None
        for n, address in enumerate(addresses, 1):
            try:
                return self._backend.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except httpcore2.ConnectError:
                if n == len(addresses):
                    raise
                # Nothing was sent: the next address, as a connection by name would.
        raise httpcore2.ConnectError("the host resolves to no address")

    def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:  # fmt: skip
        raise httpcore2.ConnectError("a model server is reached over TCP only")

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)
