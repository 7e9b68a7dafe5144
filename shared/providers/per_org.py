"""Each org's own client of its model server, and the breaker its calls go through.

What the chat LLM's router (routing.py) and the embeddings' (shared/embeddings/provider.py)
share: the org-to-model map of each process is checked at most every `refresh_s`, so a PUT
or a DELETE takes effect within seconds and a call costs no query. A check is one tiny
query, the map's version (a number a trigger raises at every write of org_providers,
migration 0022); the whole map, a row per org with a model of its own, is read again only
when that number moved: a fleet of P processes costs P one-row queries per `refresh_s`,
not P x orgs rows. A client is built once per org and configuration, rebuilt when the
org's row changes and dropped when the org goes back to the fleet's; an org's calls go
through its own breaker (breaker.py).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Generic, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from shared.infra.db.uow import UnitOfWork
from shared.infra.sealing import SecretBox
from shared.providers.breaker import Breaker
from shared.providers.service import OrgModel, models_version, org_models

log = logging.getLogger(__name__)

REFRESH_S = 5.0

Client = TypeVar("Client")
Answer = TypeVar("Answer")


class OwnModelUnavailable(Exception):
    """The org's own model cannot be called now (its key, its breaker, the map unread);
    each router raises it again as its own error."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class OrgClients(Generic[Client]):
    """The clients of orgs that set their own model, built by `build` from its configuration."""

    def __init__(
        self,
        *,
        new_uow: Callable[[], UnitOfWork],
        box: SecretBox,
        build: Callable[[OrgModel], Client],
        failure: type[Exception],
        what: str = "model",
        breaker: Breaker | None = None,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`failure`: what a client's calls raise when they fail (counted by the breaker);
        `what`: the kind of calls, for the log and the errors."""
        self.breaker = breaker or Breaker()
        self._new_uow = new_uow
        self._box = box
        self._build = build
        self._failure = failure
        self._what = what
        self._refresh_s = refresh_s
        self._clock = clock
        self._models: dict[uuid.UUID, OrgModel] | None = None
        self._version: int | None = None  # of the map in _models
        self._next_refresh = 0.0
        self._refresh_lock = threading.Lock()
        self._built: dict[uuid.UUID, tuple[OrgModel, Client]] = {}
        self._build_lock = threading.Lock()

    def call(
        self, org_id: uuid.UUID | None, fleet: Client, call: Callable[[Client], Answer]
    ) -> Answer:
        """`call` on the org's own client through its breaker, or on `fleet` for an org
        without one (and for no org)."""
        own = None if org_id is None else self.own(org_id)
        if org_id is None or own is None:
            return call(fleet)
        if not self.breaker.allows(org_id):
            raise OwnModelUnavailable(
                f"the org's own {self._what} failed {self.breaker.threshold} times in a row;"
                f" its calls rest for {self.breaker.cooldown_s:g}s"
            )
        try:
            answer = call(own)
        except self._failure as exc:
            if self.breaker.failed(org_id):
                log.warning(
                    "org %s: its own %s failed %d times in a row, calls rest %gs: %s",
                    org_id, self._what, self.breaker.threshold, self.breaker.cooldown_s, exc,
                )  # fmt: skip
            raise
        self.breaker.succeeded(org_id)
        return answer

    def config(self, org_id: uuid.UUID) -> OrgModel | None:
        """The org's own model as last read; None when the org uses the fleet's."""
        return self._org_models().get(org_id)

    def own(self, org_id: uuid.UUID) -> Client | None:
        """The org's own client, built if need be; None when the org uses the fleet's."""
        config = self.config(org_id)
        if config is None:
            return None
        if config.api_key is None:
            raise OwnModelUnavailable(
                f"the org's {self._what} API key cannot be opened (DRIFTLESS_SECRET_KEYS)"
            )
        built = self._built.get(org_id)
        if built is not None and built[0] is config:
            return built[1]
        with self._build_lock:
            built = self._built.get(org_id)
            if built is None or built[0] is not config:
                # A new server or key starts with a clean slate.
                self.breaker.forget(org_id)
                built = (config, self._build(config))
                self._built[org_id] = built
            return built[1]

    def _org_models(self) -> dict[uuid.UUID, OrgModel]:
        now = self._clock()
        if self._models is not None and now < self._next_refresh:
            return self._models
        with self._refresh_lock:
            if self._models is not None and self._clock() < self._next_refresh:
                return self._models
            try:
                with self._new_uow() as uow:
                    # The version before the map: a write committed between the two reads
                    # leaves an older version beside a newer map, read again next time;
                    # the other order could keep an old map beside the new version.
                    version = models_version(uow=uow)
                    if self._models is None or version is None or version != self._version:
                        known = self._models or {}
                        self._models = org_models(uow=uow, box=self._box, known=known)
                        self._version = version
            except SQLAlchemyError as exc:
                if self._models is None:
                    raise OwnModelUnavailable(
                        f"orgs' own models unreadable: {exc}", retryable=True
                    ) from exc
                log.warning("orgs' own models not refreshed, the last ones kept: %s", exc)
            self._next_refresh = self._clock() + self._refresh_s
            # Orgs that went back to the fleet's model: their clients go too.
            for org_id in self._built.keys() - self._models.keys():
                self._built.pop(org_id, None)
            return self._models
