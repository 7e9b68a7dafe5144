"""Where the service may send a tenant's requests: http(s) URLs on public addresses only.

A webhook subscription's URL, or an org's own model server (shared/providers/), is a
request the service makes on a client's behalf, from inside the deployment's network.
Without this check any org could make the workers POST to the metadata service
(169.254.169.254), the database's host, or localhost. So the host is resolved and every
address it resolves to must be public: when the URL is given (a clear 422), and again
before every request and every redirect hop, whose connection then goes to one of the
addresses checked and to nothing resolved later (`pin_target`, `pin_host`). A name that
answers a public address to the check and 127.0.0.1 to the connection (DNS rebinding)
therefore reaches nothing. DRIFTLESS_WEBHOOK_ALLOW_PRIVATE=true lifts the address
check, for a receiver on a dev machine or inside a trusted network.

A refusal tells the tenant "not a public address" and never what the host resolved to,
nor whether it resolved at all: that would map the deployment's network and names.
`UnsafeTarget.detail` has it, for the operator's log.

The URL is parsed once, by httpx, which sends it: a URL that another parser reads
differently, or that httpx cannot build a request to (a control character), is refused
at subscription rather than failing on every attempt.
"""

from __future__ import annotations

import ipaddress
import socket
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH = 2048
SCHEMES = ("http", "https")
NOT_PUBLIC = "not a public address"
_REFUSED = f"{NOT_PUBLIC} (DRIFTLESS_WEBHOOK_ALLOW_PRIVATE=true allows private ones)"
# IPv6 prefixes whose last 32 bits are an IPv4 address that a translator (or a dual
# stack) delivers to: that IPv4 address must be public too.
_EMBEDDING_IPV4 = (
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible, ::a.b.c.d (deprecated)
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT)
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64, the well-known prefix
)
# Local-use NAT64 (RFC 8215): translated inside some operator's network, never public.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


class Resolver(Protocol):
    def __call__(self, host: str) -> Sequence[IPAddress]:
        """The addresses `host` resolves to, preferred first; OSError if none."""
        ...


def resolve_system(host: str) -> list[IPAddress]:
    """The system resolver's (getaddrinfo) addresses of `host`, in its order, once each."""
    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    return list(dict.fromkeys(addresses))


class UnsafeTarget(Exception):
    """A URL the service must not deliver to. The message is the tenant's and names no
    address; `detail` says what was resolved, for the operator's log."""

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


@dataclass(frozen=True)
class Target:
    """A URL and the addresses its host resolved to, checked: the only ones to connect to."""

    url: httpx.URL
    addresses: tuple[IPAddress, ...]

    def at(self, address: IPAddress) -> httpx.URL:
        """The URL with `address` for its host: connecting to it resolves nothing again."""
        return self.url.copy_with(host=str(address))

    @property
    def host_header(self) -> str:
        return self.url.netloc.decode("ascii")

    @property
    def tls_name(self) -> str | None:
        """The name the server's certificate must be for (and the SNI), on https."""
        return _host(self.url) if self.url.scheme == "https" else None


def check_target(url: str, *, allow_private: bool, resolve: Resolver = resolve_system) -> None:
    """Raise UnsafeTarget unless `url` is an http(s) URL whose host resolves only to
    public addresses (any host, not resolved, when `allow_private`)."""
    parsed = check_url(url)
    if not allow_private:
        _public_addresses(_host(parsed), resolve)


def pin_target(url: str, *, allow_private: bool, resolve: Resolver = resolve_system) -> Target:
    """`url` and the addresses to connect to for it, resolved now: all public, or
    UnsafeTarget. When `allow_private`, any (none if the host does not resolve)."""
    parsed = check_url(url)
    return Target(parsed, pin_host(_host(parsed), allow_private=allow_private, resolve=resolve))


def pin_host(
    host: str, *, allow_private: bool, resolve: Resolver = resolve_system
) -> tuple[IPAddress, ...]:
    """The addresses to connect to for `host` (a name or an address), resolved now: all
    public, or UnsafeTarget. When `allow_private`, any (none if the host does not resolve)."""
    if not allow_private:
        return _public_addresses(host, resolve)
    try:
        return tuple(resolve(host))
    except (OSError, UnicodeError):
        return ()


def check_url(url: str) -> httpx.URL:
    """`url` as httpx will send it: an http(s) URL with a host and no credentials."""
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeTarget(f"longer than {MAX_URL_LENGTH} characters")
    if any(char.isspace() or unicodedata.category(char) == "Cc" for char in url):
        raise UnsafeTarget("not a valid URL (it holds a space or a control character)")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise UnsafeTarget(f"not a valid URL ({exc})") from None
    if parsed.scheme not in SCHEMES:
        raise UnsafeTarget("must be an http:// or https:// URL")
    if not parsed.raw_host:
        raise UnsafeTarget("has no host")
    if parsed.userinfo:
        raise UnsafeTarget("must not carry credentials; authenticate with the signature")
    if parsed.port is not None and not 0 < parsed.port < 2**16:
        raise UnsafeTarget(f"not a valid URL (port {parsed.port} is out of range)")
    return parsed


def _host(url: httpx.URL) -> str:
    return url.raw_host.decode("ascii")  # IDNA-encoded by httpx; an IPv6 one unbracketed


def _public_addresses(host: str, resolve: Resolver) -> tuple[IPAddress, ...]:
    try:
        addresses = tuple(resolve(host))
    except (OSError, UnicodeError) as exc:
        raise UnsafeTarget(_REFUSED, detail=f"{host} does not resolve ({exc})") from None
    if not addresses:
        raise UnsafeTarget(_REFUSED, detail=f"{host} resolves to no address")
    for address in addresses:
        if not _is_public(address):
            raise UnsafeTarget(_REFUSED, detail=f"{host} resolves to {address}, not public")
    return addresses


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:127.0.0.1 is loopback
            return _is_public(address.ipv4_mapped)
        if address.is_site_local or address in _LOCAL_NAT64:
            return False
        embedded = _embedded_ipv4(address)
        if embedded is not None and not _is_public(embedded):
            return False
    return address.is_global and not address.is_multicast


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a packet to `address` is delivered to, if it embeds one (a 6to4,
    NAT64, IPv4-compatible or IPv4-translated address). Teredo's (2001::/32) are not
    global to begin with."""
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _EMBEDDING_IPV4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None
