"""One webhook attempt: a signed POST to the subscription's URL, on an address of its host
checked just before (`targets.pin_target`), on every redirect hop too; redirects only
within the URL's origin (scheme, host and port), since each hop carries the signed body
and headers. The attempt has one deadline, DRIFTLESS_WEBHOOK_TIMEOUT_S, for every hop's
connect, send and answer together (`shared/infra/deadline.py`): a receiver trickling its
answer cannot hold a worker past it. delivery.py claims, settles and retries."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

import httpx
from standardwebhooks.webhooks import Webhook as Signer

from shared.infra.deadline import attempt_deadline, time_left
from shared.infra.sealing import SecretBox, SecretUnavailable
from shared.infra.targets import Resolver, Target, UnsafeTarget, pin_target, resolve_system
from shared.webhooks.policy import Policy

log = logging.getLogger(__name__)

MAX_REDIRECTS = 3
REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "driftless-webhooks/1"


@dataclass(frozen=True)
class Attempt:
    delivery_id: int
    webhook_id: uuid.UUID
    event_id: uuid.UUID
    url: str
    sealed_secret: str
    body: str
    number: int  # 1 for the first attempt


@dataclass(frozen=True)
class Answer:
    status_code: int | None  # None: no HTTP answer (timeout, refused, unsafe target)
    error: str | None = None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def attempt(
    attempt: Attempt, *, http: httpx.Client, box: SecretBox, policy: Policy,
    resolve: Resolver = resolve_system,
) -> Answer:  # fmt: skip
    """POST the event to the subscription, signed, on an address checked for this very
    hop; follow redirects within the subscription's origin only."""
    try:
        signer = Signer(box.open(attempt.sealed_secret))
    except SecretUnavailable as exc:
        log.error("webhook %s: %s", attempt.webhook_id, exc)
        return Answer(None, "the secret cannot be opened (DRIFTLESS_SECRET_KEYS)")
    msg_id = str(attempt.event_id)
    now = dt.datetime.now(dt.UTC)
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signer.sign(msg_id, now, attempt.body),
    }
    with attempt_deadline(policy.timeout_s):
        return _hops(attempt, http=http, headers=headers, policy=policy, resolve=resolve)


def _hops(
    attempt: Attempt, *, http: httpx.Client, headers: dict[str, str], policy: Policy,
    resolve: Resolver,
) -> Answer:  # fmt: skip
    url, origin = attempt.url, None
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            target = pin_target(url, allow_private=policy.allow_private, resolve=resolve)
        except UnsafeTarget as exc:
            log.warning("webhook delivery %s: refused target: %s", attempt.delivery_id, exc.detail)
            return Answer(None, f"refused target: {exc}")
        origin = origin or _origin(target.url)
        try:
            status, location = _post(
                http, target, content=attempt.body.encode(), headers=headers,
                timeout=time_left(),
            )  # fmt: skip
        except httpx.HTTPError as exc:
            # Refused, unreachable or timed out would map the network behind the target
            # for the tenant; the operator's log has which.
            log.info(
                "webhook delivery %s: %s at %s: %s: %s", attempt.delivery_id,
                target.host_header, [str(a) for a in target.addresses], type(exc).__name__, exc,
            )  # fmt: skip
            protocol = isinstance(exc, httpx.ProtocolError)
            return Answer(None, "no valid HTTP answer" if protocol else "connection failed")
        if status not in REDIRECTS or not location:
            return Answer(status)
        # Another origin would get the signed body and headers meant for this one.
        try:
            url = str(target.url.join(location))
        except httpx.InvalidURL:
            return Answer(status, "redirect to an invalid URL")
        if _origin(httpx.URL(url)) != origin:
            return Answer(status, "redirect to another origin, not followed")
    return Answer(status, f"more than {MAX_REDIRECTS} redirects")


def _post(
    http: httpx.Client, target: Target, *, content: bytes, headers: dict[str, str],
    timeout: float | None,
) -> tuple[int, str | None]:  # fmt: skip
    """POST to the target's first address that takes the connection: the URL's host is
    that address, so nothing is resolved again; Host and TLS stay on the name."""
    extensions = {} if target.tls_name is None else {"sni_hostname": target.tls_name}
    # The pool keys connections by the URL's host, here an address: an idle TLS
    # connection verified for one name would carry the next request for another name on
    # the same address. A TLS connection therefore serves one request and closes.
    pinned = {"host": target.host_header}
    if target.tls_name is not None:
        pinned["connection"] = "close"
    for n, address in enumerate(target.addresses, 1):
        try:
            # Streamed and never read: a receiver's answer body is not ours to hold.
            with http.stream(
                "POST", target.at(address), content=content,
                headers={**headers, **pinned}, extensions=extensions,
                timeout=timeout, follow_redirects=False,
            ) as response:  # fmt: skip
                return response.status_code, response.headers.get("location")
        except httpx.ConnectError:
            if n == len(target.addresses):
                raise
            # Nothing was sent: the next address, as a connection by name would.
    raise httpx.ConnectError("the host resolves to no address")


def _origin(url: httpx.URL) -> tuple[str, bytes, int | None]:
    return url.scheme, url.raw_host, url.port  # httpx leaves a default port out
