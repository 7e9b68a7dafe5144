"""Delivering webhook events: one signed POST per attempt, retried until delivered or dead.

A delivery job (worker/tasks.py `deliver_webhook`) runs `deliver`:

1. It takes one of the subscription's few slots (`WebhookSlots`, in Redis). A receiver
   that answers slowly therefore holds at most SLOTS_PER_WEBHOOK workers, whatever its
   backlog; a job that finds no slot free leaves its delivery to the slot holders.
2. Holding the slot, it claims the delivery (`claim`: due, owed, not being attempted)
   and makes the attempt, outside any transaction: the Standard Webhooks headers, the
   event's body as recorded, sent to an address of the URL's host checked just before
   (`targets.pin_target`), on every redirect hop too; redirects only within the URL's
   origin (scheme, host and port), since each hop carries the signed body and headers.
3. `settle` records the answer: delivered; or failed, due again after an exponential
   backoff with jitter; or dead after DRIFTLESS_WEBHOOK_MAX_ATTEMPTS.
4. It goes on with the subscription's next due delivery, for up to DRAIN_BUDGET_S,
   then frees the slot and, if more are due, sends a job for the next.

Claiming moves `next_attempt_at` past the attempt's deadline (a lease), so a second job
for the same delivery finds nothing to do, and a worker killed mid-attempt leaves it
due again once the lease ends; the beat's dispatcher (`overdue_jobs`) sends a job for
every delivery overdue by more than its period, which is how nothing is lost.
Receivers deduplicate by `webhook-id`, the event's id, the same on every attempt.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import math
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import redis
from sqlalchemy import text
from standardwebhooks.webhooks import Webhook as Signer

from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import WEBHOOK_ATTEMPT_SECONDS, WEBHOOK_DELIVERIES, count_on_commit
from shared.infra.queue import DELIVER_WEBHOOK, Job
from shared.webhooks.secrets import SecretBox, SecretUnavailable
from shared.webhooks.targets import Resolver, Target, UnsafeTarget, pin_target, resolve_system

log = logging.getLogger(__name__)

SLOTS_PER_WEBHOOK = 4
DRAIN_BUDGET_S = 30.0
MAX_BACKOFF_S = 6 * 3600.0
MAX_REDIRECTS = 3
# A retry due within this is sent as a job with a countdown; a later one is left to the
# dispatcher (a broker holds a countdown job in a worker's memory until it is due).
COUNTDOWN_LIMIT_S = 300.0
DISPATCH_BATCH = 1000
REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "driftless-webhooks/1"


@dataclass(frozen=True)
class Policy:
    """The settings a delivery follows (DRIFTLESS_WEBHOOK_*)."""

    max_attempts: int
    backoff_s: float
    timeout_s: float
    allow_private: bool

    @property
    def lease(self) -> dt.timedelta:
        """How long a claimed attempt may take: each hop's connect, send and answer at
        the time limit, and a margin."""
        return dt.timedelta(seconds=(MAX_REDIRECTS + 1) * 3 * self.timeout_s + 5)


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


_CLAIM = """
    UPDATE webhook_deliveries AS d
    SET attempts = d.attempts + 1, next_attempt_at = :now + :lease
    FROM webhooks AS w, webhook_events AS e
    WHERE d.id = (
        SELECT id FROM webhook_deliveries
        WHERE {which} AND status IN ('pending', 'failed') AND next_attempt_at <= :now
        ORDER BY next_attempt_at, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) AND w.id = d.webhook_id AND e.id = d.event_id
    RETURNING d.id, d.webhook_id, d.event_id, w.url, w.sealed_secret, e.body, d.attempts
"""
_CLAIM_DELIVERY = text(_CLAIM.format(which="id = :id"))
_CLAIM_NEXT_OF_WEBHOOK = text(_CLAIM.format(which="webhook_id = :id"))


def claim(
    uow: UnitOfWork, *, delivery_id: int | None = None, webhook_id: uuid.UUID | None = None,
    now: dt.datetime, lease: dt.timedelta,
) -> Attempt | None:  # fmt: skip
    """Claim the delivery (or the webhook's next due one) for an attempt; None if it is
    not owed, not due, or being attempted."""
    statement = _CLAIM_DELIVERY if delivery_id is not None else _CLAIM_NEXT_OF_WEBHOOK
    key = delivery_id if delivery_id is not None else webhook_id
    row = uow.connection().execute(statement, {"id": key, "now": now, "lease": lease}).first()
    return None if row is None else Attempt(*row)


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
        return Answer(None, "the secret cannot be opened (DRIFTLESS_WEBHOOK_KEYS)")
    msg_id = str(attempt.event_id)
    now = dt.datetime.now(dt.UTC)
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signer.sign(msg_id, now, attempt.body),
    }
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
                timeout=policy.timeout_s,
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
    timeout: float,
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


def backoff_s(attempts: int, *, base_s: float, rng: Callable[[], float] = random.random) -> float:
    """The wait after the `attempts`-th failed attempt: doubling from `base_s`, capped at
    6 h, with equal jitter (half fixed, half random) so receivers that failed together
    are not retried together."""
    doublings = min(attempts - 1, 64)  # far past the cap already; 2.0 ** 1024 overflows
    ceiling = min(MAX_BACKOFF_S, base_s * 2.0**doublings)
    return ceiling / 2 + rng() * ceiling / 2


_SETTLE = text(
    """
    UPDATE webhook_deliveries
    SET status = :status, last_status_code = :code, last_error = :error,
        next_attempt_at = :next_at, delivered_at = :delivered_at
    WHERE id = :id AND attempts = :number AND status IN ('pending', 'failed')
    """
)


def settle(
    uow: UnitOfWork, attempt: Attempt, answer: Answer, *, now: dt.datetime, policy: Policy
) -> Job | None:
    """Record the attempt's answer; the job of the retry when it is due soon enough for
    a countdown (a later one is the dispatcher's). An attempt that a newer one overtook
    (its lease ended) records nothing."""
    retry_in: float | None = None
    if answer.delivered:
        status = "delivered"
    elif attempt.number >= policy.max_attempts:
        status = "dead"
    else:
        status = "failed"
        retry_in = backoff_s(attempt.number, base_s=policy.backoff_s)
    next_at = now + dt.timedelta(seconds=retry_in or 0)
    recorded = uow.connection().execute(
        _SETTLE,
        {
            "id": attempt.delivery_id, "number": attempt.number, "status": status,
            "code": answer.status_code, "error": answer.error, "next_at": next_at,
            "delivered_at": now if answer.delivered else None,
        },
    )  # fmt: skip
    if not recorded.rowcount:
        return None
    count_on_commit(uow.session, WEBHOOK_DELIVERIES.labels(status))
    if status == "dead":
        log.warning(
            "webhook delivery %s of event %s is dead after %d attempts: %s",
            attempt.delivery_id, attempt.event_id, attempt.number,
            answer.error or f"HTTP {answer.status_code}",
        )  # fmt: skip
    if retry_in is None or retry_in > COUNTDOWN_LIMIT_S:
        return None
    return Job(DELIVER_WEBHOOK, {"delivery_id": attempt.delivery_id}, countdown=retry_in)


class WebhookSlots:
    """At most SLOTS_PER_WEBHOOK attempts in flight per subscription, fleet-wide (Redis).

    A slot is a member of a sorted set scored by its expiry, taken by one script (a
    check and a take that no other worker can come between), so a worker killed while
    holding one frees it when the lease would have ended.
    """

    _TAKE = """
        redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
        if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
        redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
        redis.call('EXPIRE', KEYS[1], ARGV[5])
        return 1
    """

    def __init__(self, client: redis.Redis, *, hold: dt.timedelta) -> None:
        self._redis = client
        self._hold_s = hold.total_seconds()
        self._take = client.register_script(self._TAKE)

    @contextmanager
    def slot(self, webhook_id: uuid.UUID) -> Iterator[bool]:
        key = f"driftless:webhook-slots:{webhook_id}"
        token = uuid.uuid4().hex
        now = time.time()
        args: list[str | float] = [
            now,
            now + self._hold_s,
            token,
            SLOTS_PER_WEBHOOK,
            math.ceil(self._hold_s) + 1,
        ]
        held = bool(self._take(keys=[key], args=args))
        try:
            yield held
        finally:
            if held:
                self._redis.zrem(key, token)


def deliver(
    *,
    new_uow: Callable[[], UnitOfWork],
    slots: WebhookSlots,
    http: httpx.Client,
    box: SecretBox,
    policy: Policy,
    delivery_id: int,
) -> int:
    """The deliver_webhook job: attempt this delivery and, holding its subscription's
    slot, the subscription's other due ones. Returns how many attempts it made."""
    with new_uow() as uow:
        webhook_id = (
            uow.connection()
            .execute(
                text("SELECT webhook_id FROM webhook_deliveries WHERE id = :id"),
                {"id": delivery_id},
            )
            .scalar()
        )
    if webhook_id is None:  # the subscription was deleted, and its deliveries with it
        return 0
    with slots.slot(webhook_id) as held:
        if not held:  # the slot holders will reach it; the dispatcher if they do not
            return 0
        attempt_one = functools.partial(
            _attempt_one, new_uow=new_uow, http=http, box=box, policy=policy
        )
        made = int(attempt_one(delivery_id=delivery_id))
        deadline = time.monotonic() + DRAIN_BUDGET_S
        while time.monotonic() < deadline and attempt_one(webhook_id=webhook_id):
            made += 1
    # Deliveries whose jobs found every slot taken: the next one gets a job now.
    with new_uow() as uow:
        due = (
            uow.connection()
            .execute(
                text(
                    "SELECT id FROM webhook_deliveries WHERE webhook_id = :w"
                    " AND status IN ('pending', 'failed') AND next_attempt_at <= now()"
                    " ORDER BY next_attempt_at, id LIMIT 1"
                ),
                {"w": webhook_id},
            )
            .scalar()
        )
        if due is not None:
            uow.enqueue(Job(DELIVER_WEBHOOK, {"delivery_id": due}))
        uow.commit()
    return made


def _attempt_one(
    *, new_uow: Callable[[], UnitOfWork], http: httpx.Client, box: SecretBox, policy: Policy,
    delivery_id: int | None = None, webhook_id: uuid.UUID | None = None,
) -> bool:  # fmt: skip
    with new_uow() as uow:
        claimed = claim(
            uow, delivery_id=delivery_id, webhook_id=webhook_id,
            now=dt.datetime.now(dt.UTC), lease=policy.lease,
        )  # fmt: skip
        uow.commit()
    if claimed is None:
        return False
    started = time.perf_counter()
    try:
        answer = attempt(claimed, http=http, box=box, policy=policy)
    except Exception:
        # Still an attempt: left unsettled, the delivery would be claimed again after
        # every lease, past the last attempt, and never be dead.
        log.exception("webhook delivery %s: the attempt raised", claimed.delivery_id)
        answer = Answer(None, "internal error")
    WEBHOOK_ATTEMPT_SECONDS.observe(time.perf_counter() - started)
    with new_uow() as uow:
        retry = settle(uow, claimed, answer, now=dt.datetime.now(dt.UTC), policy=policy)
        if retry is not None:
            uow.enqueue(retry)
        uow.commit()
    return True


def overdue_jobs(uow: UnitOfWork, *, now: dt.datetime, grace: dt.timedelta) -> list[Job]:
    """The dispatcher (beat, every DRIFTLESS_RECONCILE_S): a job for each delivery overdue
    by more than `grace` (that period), whose job was lost, outlived a killed worker, or
    was never sent (a long backoff). A delivery whose job is merely queued behind others
    gets a second one, which finds nothing to do."""
    ids = (
        uow.connection()
        .execute(
            text(
                "SELECT id FROM webhook_deliveries WHERE status IN ('pending', 'failed')"
                " AND next_attempt_at <= :before ORDER BY next_attempt_at LIMIT :limit"
            ),
            {"before": now - grace, "limit": DISPATCH_BATCH},
        )
        .scalars()
    )
    return [Job(DELIVER_WEBHOOK, {"delivery_id": delivery_id}) for delivery_id in ids]
