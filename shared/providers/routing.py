"""Each org's calls to its own model (bring your own key), the others' to the fleet's.

`OrgRoutedLLM` is the process's LLM (shared/infra/bootstrap.py wraps the fleet's in it):
a call whose request names an org that set a model (PUT /agents-api/provider) goes to
an OpenAI-compatible provider built for that org, through its own circuit breaker
(breaker.py); every other call goes to `inner`, the fleet's LLM with its rate limit.
The org-to-model map and the clients built from it are per_org.py's, which the
embeddings share.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
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
from shared.providers.breaker import Breaker
from shared.providers.per_org import REFRESH_S, OrgClients, OwnModelUnavailable
from shared.providers.pinning import PinnedBackend
from shared.providers.service import OrgModel

# Builds the LLM an org's calls use, from its configuration.
Build = Callable[[OrgModel], LLM]


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
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `inner` by that name: wrappers and readers of the chain walk `.inner` down.
        self.inner = inner
        self.model = inner.model  # the fleet's; an org's own is recorded by its provider
        self.orgs = OrgClients(
            new_uow=new_uow, box=box, build=build, failure=LLMError, breaker=breaker,
            refresh_s=refresh_s, clock=clock,
        )  # fmt: skip
        self.breaker = self.orgs.breaker

    def summarize(self, request: SummaryRequest) -> Completion:
        return self._call(request.org_id, lambda llm: llm.summarize(request))

    def detect_drift(self, request: DriftRequest) -> Completion:
        return self._call(request.org_id, lambda llm: llm.detect_drift(request))

    def _call(self, org_id: uuid.UUID | None, call: Callable[[LLM], Completion]) -> Completion:
        try:
            return self.orgs.call(org_id, self.inner, call)
        except OwnModelUnavailable as exc:
            raise LLMError(str(exc), retryable=exc.retryable) from exc.__cause__


def provider_builder(settings: Settings, *, calls: int, on_call: CallListener | None) -> Build:
    """How an org's own provider is built: the fleet's timeout and retries, its own key and
    model, and its own server on pinned connections (or the fleet's, which the operator
    chose, as the fleet's are made)."""
    pinned = PinnedBackend(allow_private=settings.webhook_allow_private)

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
) -> OrgRoutedLLM:
    """`fleet` for every org but those that set their own model."""
    build = provider_builder(settings, calls=calls, on_call=on_call)
    return OrgRoutedLLM(fleet, new_uow=new_uow, box=box, build=build)
