"""Vectors of texts from an OpenAI-compatible `POST /v1/embeddings` server.

`make_embedder` builds the process's `Embedder` from the settings, or None when
DRIFTLESS_EMBEDDINGS=none (search stays lexical). An org that set its own model
(PUT /agents-api/provider) gets its vectors from its own server with its own key, through
the same per-org clients, pinned connections and breaker as its chat calls
(shared/providers/per_org.py), with one deadline per call (shared/infra/deadline.py) and
at most its share of the workers' calls (slots.py); the model is the fleet's
DRIFTLESS_EMBEDDINGS_MODEL either way, so every vector of a deployment is of one model,
and `checked_vectors` keeps every answer to its size.
"""

from __future__ import annotations

import logging
import math
import ssl
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import httpcore2
import httpx2
import openai

from shared.embeddings.schema import VECTOR_MAX_DIMENSIONS
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.deadline import HTTPCORE2, DeadlineBackend, attempt_deadline
from shared.infra.sealing import SecretBox
from shared.llm.openai_provider import (
    NO_API_KEY,
    TRANSIENT,
    connection_limits,
    failure_reason,
    http_client,
)
from shared.llm.telemetry import OPENAI, model_call
from shared.providers.per_org import OrgClients, OwnModelUnavailable
from shared.providers.pinning import PinnedBackend
from shared.providers.service import OrgModel

log = logging.getLogger(__name__)

# Inputs per request: OpenAI takes up to 2,048 (and 300,000 tokens) in one; compatible
# servers often fewer. A longer list is sent as several requests, in order.
MAX_BATCH = 256
FLEET_CONFIG = "fleet"  # the cache label of the fleet's embeddings settings (no org's own)


class EmbeddingsError(Exception):
    """The provider failed: an HTTP error, a timeout, or an answer that is not one vector
    per input. `retryable`: another attempt may succeed (a timeout, 429, 5xx)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class EmbeddingsTimeout(EmbeddingsError):
    """The server did not answer within the call's timeout."""


class InvalidVectors(EmbeddingsError):
    """The server answered, but not vectors that can be stored or searched by: of another
    size than the model's, longer than pgvector takes, or holding a number that is not
    finite. Asking again brings the same (not retryable)."""


class Embedder(Protocol):
    model: str  # recorded with each vector
    dimensions: int | None  # asked of the server (DRIFTLESS_EMBEDDINGS_DIMENSIONS), if set

    def embed(
        self,
        texts: Sequence[str],
        *,
        org_id: uuid.UUID | None = None,
        timeout_s: float | None = None,
        dimensions: int | None = None,
    ) -> list[list[float]]:
        """One vector per text, in order; `timeout_s`: one attempt, no retries, each request
        cut off after that long; `dimensions`: the length every vector must have (else the
        configured one, if any). Raises EmbeddingsError (InvalidVectors for a bad answer)."""
        ...


@runtime_checkable
class Routed(Protocol):
    """An embedder whose server depends on the org: `source` names the one the org's
    texts go to now, so that a cached vector is never one of another server's."""

    def source(self, org_id: uuid.UUID | None) -> str: ...


class OpenAIEmbedder:
    """The `Embedder` protocol over one OpenAI-compatible server."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        model: str,
        dimensions: int | None,
        timeout_s: float,
        max_retries: int,
        network_backend: httpcore2.NetworkBackend | None = None,
        tls: ssl.SSLContext | None = None,
        max_batch: int = MAX_BATCH,
    ) -> None:
        """`network_backend` opens the connections (an org's server: pinned addresses,
        shared/providers/pinning.py); `tls`, a CA bundle already loaded, to share."""
        self.model = model
        self.dimensions = dimensions
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_batch = max_batch
        client = http_client(
            tls or httpx2.create_ssl_context(), connection_limits(1), network_backend
        )
        self._client = openai.OpenAI(
            api_key=api_key or NO_API_KEY,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
            http_client=client,
        )
        # A call with a deadline is one attempt: a retry would outlive it.
        self._once = self._client.with_options(max_retries=0)

    def embed(
        self,
        texts: Sequence[str],
        *,
        org_id: uuid.UUID | None = None,
        timeout_s: float | None = None,
        dimensions: int | None = None,
    ) -> list[list[float]]:
        # One deadline for the whole call, every request and retry, wherever the connections
        # keep to it (an org's own server: shared/infra/deadline.py).
        with (
            model_call("embeddings", provider=OPENAI, model=self.model, org_id=org_id) as span,
            attempt_deadline(self.timeout_s if timeout_s is None else timeout_s),
        ):
            span.set_attribute("driftless.embeddings.texts", len(texts))
            vectors: list[list[float]] = []
            for start in range(0, len(texts), self.max_batch):
                batch = list(texts[start : start + self.max_batch])
                vectors += self._batch(batch, timeout_s, dimensions or self.dimensions)
            if len({len(vector) for vector in vectors}) > 1:
                raise InvalidVectors("the answers' vectors are of different lengths")
        return vectors

    def close(self) -> None:
        self._client.close()

    def _batch(
        self, texts: list[str], timeout_s: float | None, expected: int | None
    ) -> list[list[float]]:
        extra: dict[str, Any] = {}
        if self.dimensions is not None:
            extra["dimensions"] = self.dimensions
        if timeout_s is not None:
            extra["timeout"] = timeout_s
        client = self._client if timeout_s is None else self._once
        try:
            # `float`: what every compatible server speaks (the client asks for base64).
            answer = client.embeddings.create(
                model=self.model, input=texts, encoding_format="float", **extra
            )
        except openai.OpenAIError as exc:
            retries = self.max_retries if timeout_s is None else 0
            reason = failure_reason(exc, timeout_s=timeout_s or self.timeout_s, max_retries=retries)
            log.warning("embeddings of %d texts by %s failed: %s", len(texts), self.model, reason)
            if isinstance(exc, openai.APITimeoutError):
                raise EmbeddingsTimeout(reason, retryable=True) from exc
            raise EmbeddingsError(reason, retryable=isinstance(exc, TRANSIENT)) from exc
        # A bad answer is logged by the caller, which knows the org (and a search's
        # complaints are a line a minute at most).
        return checked_vectors(answer.data, count=len(texts), dimensions=expected)


def checked_vectors(data: Any, *, count: int, dimensions: int | None) -> list[list[float]]:
    """The answer's vectors in input order, if it holds exactly one vector of finite numbers
    per input, all of one length (`dimensions` when given) that pgvector takes; else
    InvalidVectors: one bad vector in a statement would fail every org's of it."""
    try:
        items = sorted(data, key=lambda item: item.index)
        indexes = [item.index for item in items]
        vectors = [list(item.embedding) for item in items]
    except (AttributeError, TypeError) as exc:
        raise InvalidVectors(f"the answer is not a list of embeddings: {exc}") from None
    if indexes != list(range(count)):
        raise InvalidVectors(f"{len(indexes)} embeddings answered for {count} inputs")
    lengths = {len(vector) for vector in vectors}
    if len(lengths) > 1 or 0 in lengths:
        raise InvalidVectors(f"vectors of lengths {sorted(lengths)}: one non-zero length expected")
    if dimensions is not None and lengths != {dimensions}:
        raise InvalidVectors(f"vectors of length {lengths.pop()}, the model's are {dimensions}")
    if max(lengths, default=0) > VECTOR_MAX_DIMENSIONS:
        raise InvalidVectors(
            f"vectors of length {lengths.pop()}: pgvector takes at most {VECTOR_MAX_DIMENSIONS}"
        )
    for vector in vectors:
        for number in vector:
            if isinstance(number, bool) or not isinstance(number, int | float):
                raise InvalidVectors(f"a vector holds {type(number).__name__}, not a number")
            if not math.isfinite(number):
                raise InvalidVectors("a vector holds a number that is not finite")
    return [[float(number) for number in vector] for vector in vectors]


class OrgRoutedEmbedder:
    """The `Embedder` protocol, routed per call by the org: its own server or the fleet's."""

    def __init__(self, fleet: OpenAIEmbedder, *, orgs: OrgClients[OpenAIEmbedder]) -> None:
        self.fleet = fleet
        self.model = fleet.model
        self.dimensions = fleet.dimensions
        self.orgs = orgs

    def embed(
        self,
        texts: Sequence[str],
        *,
        org_id: uuid.UUID | None = None,
        timeout_s: float | None = None,
        dimensions: int | None = None,
    ) -> list[list[float]]:
        if not texts:
            return []

        # A bad answer is checked inside the org's call, so its breaker counts it.
        def call(embedder: OpenAIEmbedder) -> list[list[float]]:
            return embedder.embed(texts, org_id=org_id, timeout_s=timeout_s, dimensions=dimensions)

        try:
            return self.orgs.call(org_id, self.fleet, call)
        except OwnModelUnavailable as exc:
            raise EmbeddingsError(str(exc), retryable=exc.retryable) from exc.__cause__

    def source(self, org_id: uuid.UUID | None) -> str:
        """`fleet`, or the org's own server as of its last change."""
        config = None if org_id is None else self.orgs.config(org_id)
        return FLEET_CONFIG if config is None else f"org:{config.updated_at.isoformat()}"


def fleet_base_url(settings: Settings) -> str | None:
    """The fleet's embeddings server: its own, or the model's."""
    return settings.embeddings_base_url or settings.openai_base_url


def embedder_builder(settings: Settings) -> Callable[[OrgModel], OpenAIEmbedder]:
    """How an org's embedder is built: its own key, its own server on pinned connections (or
    the fleet's, which the operator chose), the fleet's model, dimensions and timeouts."""
    # An org's own server: pinned addresses, and one deadline for each call's connect, send
    # and whole answer (a server trickling its answer holds no worker past it).
    pinned = PinnedBackend(allow_private=settings.providers_may_be_private)
    own = DeadlineBackend(pinned, timeouts=HTTPCORE2)
    tls = httpx2.create_ssl_context()

    def build(config: OrgModel) -> OpenAIEmbedder:
        return OpenAIEmbedder(
            api_key=config.api_key,
            base_url=config.base_url or fleet_base_url(settings),
            model=settings.embeddings_model,
            dimensions=settings.embeddings_dimensions,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            network_backend=None if config.base_url is None else own,
            tls=tls,
        )

    return build


def make_embedder(
    settings: Settings,
    *,
    new_uow: Callable[[], UnitOfWork] | None = None,
    box: SecretBox | None = None,
) -> Embedder | None:
    """The fleet's embedder, routed by org when `new_uow` and `box` are given; None when
    DRIFTLESS_EMBEDDINGS=none."""
    if settings.embeddings == "none":
        return None
    fleet = OpenAIEmbedder(
        api_key=settings.embeddings_api_key or settings.openai_api_key,
        base_url=fleet_base_url(settings),
        model=settings.embeddings_model,
        dimensions=settings.embeddings_dimensions,
        timeout_s=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
    )
    if new_uow is None or box is None:
        return fleet
    orgs = OrgClients(
        new_uow=new_uow, box=box, build=embedder_builder(settings), failure=EmbeddingsError,
        what="embeddings server",
    )  # fmt: skip
    return OrgRoutedEmbedder(fleet, orgs=orgs)
