"""The webhook attempts' HTTP client: every connection under its attempt's deadline
(shared/infra/deadline.py)."""

from __future__ import annotations

import httpcore
import httpx

from shared.infra.deadline import DeadlineBackend


def webhook_client(*, limits: httpx.Limits) -> httpx.Client:
    """The webhook attempts' client: no redirects followed by itself, no proxy from the
    environment, and every connection under its attempt's deadline."""
    transport = httpx.HTTPTransport(limits=limits, trust_env=False)
    # httpx.HTTPTransport takes no network backend; its pool is rebuilt as it builds it
    # (no proxy, HTTP/1.1), with ours. tests/integration/webhooks/test_attempt_deadline.py
    # fails if an httpx upgrade stops using it.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=DeadlineBackend(),
    )
    return httpx.Client(transport=transport, follow_redirects=False, trust_env=False)
