"""Each org's calls to its own model (bring your own key), the others' to the fleet's.

`OrgRoutedLLM` is the process's LLM (shared/bootstrap.py wraps the fleet's in it):
a call whose request names an org that set a model (PUT /agents-api/provider) goes to
an OpenAI-compatible provider built for that org, through its own circuit breaker
(breaker.py); every other call goes to `inner`, the fleet's LLM with its rate limit.
The org-to-model map and the clients built from it are per_org.py's, which the
embeddings share.

An org's calls to its own model take at most `DRIFTLESS_OWN_MODEL_CALLS_PER_ORG` of the
fleet's slots at once (`OwnModelShare`, leases in Redis): its slow server holds that many
of the workers' slots, never all of them. A call past its share raises `RateLimited`
(the org's, not the fleet's) before it is made: its job yields its org's turn in the
fair queue (worker/fair.py) and comes back when a call of the org has ended.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.leases import OrgLeases
from shared.infra.metrics import LIMIT_HITS
from shared.infra.sealing import SecretBox
from shared.llm.base import (
    LLM,
    CallListener,
    Completion,
    DriftRequest,
    LLMError,
    SummaryRequest,
)
from shared.llm.openai_provider import OpenAIProvider
from shared.llm.ratelimit import RateLimited
from shared.providers.breaker import Breaker
from shared.providers.per_org import REFRESH_S, OrgClients, OwnModelUnavailable
from shared.providers.pinning import PinnedBackend
from shared.providers.service import OrgModel

# Builds the LLM an org's calls use, from its configuration.
Build = Callable[[OrgModel], LLM]

# An org refused for its share of calls in flight yields its turn this long at most; a
# call of its ending sends a parked ticket sooner (worker/fair.py).
SHARE_WAIT_S = 1.0
# What a lease outlives its call by, should the process die mid-call.
LEASE_MARGIN_S = 10.0


class OwnModelShare:
    """At most `per_org` calls of an org to its own model in flight, fleet-wide."""

    def __init__(self, client: redis.Redis, *, per_org: int, call_s: float) -> None:
        self.per_org = per_org
        self._leases = OrgLeases(client, kind="own-model-calls", lease_s=call_s + LEASE_MARGIN_S)

    @contextmanager
    def slot(self, org_id: uuid.UUID) -> Iterator[None]:
        """Hold one of the org's slots for the call, or raise the org's `RateLimited`."""
        try:
            lease = self._leases.acquire(org_id=org_id, limit=self.per_org)
        except redis.RedisError as exc:
            # Without the count no share holds: fail closed, as the fleet's quota does.
            raise RateLimited(
                f"the own-model share is unavailable: {exc}", retry_after_s=5.0, fleet=False
            ) from exc
        if lease is None:
            LIMIT_HITS.labels("own_model_calls").inc()
            raise RateLimited(
                f"org {org_id} has {self.per_org} calls to its own model in flight"
                " (DRIFTLESS_OWN_MODEL_CALLS_PER_ORG)",
                retry_after_s=SHARE_WAIT_S,
                fleet=False,
            )
        try:
            yield
        finally:
            self._leases.release(org_id=org_id, lease_id=lease)


class OrgRoutedLLM:
    """The `LLM` protocol, routed per call by the request's org."""

    def __init__(
        self,
        inner: LLM,
        *,
        new_uow: Callable[[], UnitOfWork],
        box: SecretBox,
        build: Build,
        breaker: Breaker | None = None,
        share: OwnModelShare | None = None,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`share`: each org's calls in flight to its own model (None: not bounded)."""
        # `inner` by that name: wrappers and readers of the chain walk `.inner` down.
        self.inner = inner
        self.model = inner.model  # the fleet's; an org's own is recorded by its provider
        self.orgs = OrgClients(
            new_uow=new_uow, box=box, build=build, failure=LLMError, breaker=breaker,
            refresh_s=refresh_s, clock=clock,
        )  # fmt: skip
        self.breaker = self.orgs.breaker
        self.share = share

    def summarize(self, request: SummaryRequest) -> Completion:
        return self._call(request.org_id, lambda llm: llm.summarize(request))

    def detect_drift(self, request: DriftRequest) -> Completion:
        return self._call(request.org_id, lambda llm: llm.detect_drift(request))

    def _call(self, org_id: uuid.UUID | None, call: Callable[[LLM], Completion]) -> Completion:
        try:
            return self.orgs.call(
                org_id, self.inner, lambda llm: self._within_share(org_id, llm, call)
            )
        except OwnModelUnavailable as exc:
            raise LLMError(str(exc), retryable=exc.retryable) from exc.__cause__

    def _within_share(
        self, org_id: uuid.UUID | None, llm: LLM, call: Callable[[LLM], Completion]
    ) -> Completion:
        if org_id is None or llm is self.inner or self.share is None:
            return call(llm)
        with self.share.slot(org_id):
            return call(llm)


def provider_builder(settings: Settings, *, calls: int, on_call: CallListener | None) -> Build:
    """How an org's own provider is built: the fleet's timeout and retries, its own key and
    model, and its own server on pinned connections (or the fleet's, which the operator
    chose, as the fleet's are made)."""
    pinned = PinnedBackend(allow_private=settings.providers_may_be_private)

    def build(config: OrgModel) -> LLM:
        return OpenAIProvider(
            api_key=config.api_key,
            base_url=config.base_url or settings.openai_base_url,
            model=config.model,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            max_connections=calls,
            on_call=on_call,  # the usage ledger: by the org's model name
            network_backend=None if config.base_url is None else pinned,
            own_model=True,  # its name is no metric label: orgs choose any
        )

    return build


def route_by_org(
    fleet: LLM,
    *,
    settings: Settings,
    new_uow: Callable[[], UnitOfWork],
    box: SecretBox,
    calls: int,
    on_call: CallListener | None,
    redis_client: redis.Redis,
) -> OrgRoutedLLM:
    """`fleet` for every org but those that set their own model, each within its share."""
    build = provider_builder(settings, calls=calls, on_call=on_call)
    share = OwnModelShare(
        redis_client, per_org=settings.own_model_calls_per_org, call_s=settings.llm_timeout_s
    )
    return OrgRoutedLLM(fleet, new_uow=new_uow, box=box, build=build, share=share)
