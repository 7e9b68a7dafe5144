"""Where a webhook may be delivered: http(s) URLs on public addresses only.

A subscription's URL is a request the service makes on a client's behalf, from inside
the deployment's network. Without this check any org could make the workers POST to
the metadata service (169.254.169.254), the database's host, or localhost. So the host
is resolved and every address it resolves to must be public, at subscription time (a
clear 422) and again before every attempt and every redirect (DNS answers change).
DRIFTLESS_WEBHOOK_ALLOW_PRIVATE=true lifts the address check, for a receiver on a dev
machine or inside a trusted network.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2048
SCHEMES = ("http", "https")


class UnsafeTarget(Exception):
    """A URL the service must not deliver to; the message says why, naming no secret."""


def check_target(url: str, *, allow_private: bool) -> None:
    """Raise UnsafeTarget unless `url` is an http(s) URL whose host resolves only to
    public addresses (any address, when `allow_private`)."""
    host = _host_of(url)
    if allow_private:
        return
    for address in _addresses(host):
        if not _is_public(address):
            raise UnsafeTarget(
                f"{host} resolves to {address}, a loopback, private, link-local or reserved"
                " address (DRIFTLESS_WEBHOOK_ALLOW_PRIVATE=true allows it)"
            )


def _host_of(url: str) -> str:
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeTarget(f"longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError as exc:
        raise UnsafeTarget(f"not a valid URL ({exc})") from None
    if parts.scheme not in SCHEMES:
        raise UnsafeTarget("must be an http:// or https:// URL")
    if not parts.hostname:
        raise UnsafeTarget("has no host")
    if parts.username is not None or parts.password is not None:
        raise UnsafeTarget("must not carry credentials; authenticate with the signature")
    return parts.hostname


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise UnsafeTarget(f"{host} does not resolve ({exc})") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is loopback
    return address.is_global and not address.is_multicast
