"""The real provider: any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama,
LiteLLM), through the official `openai` client.

Only `model`, `messages`, `response_format` and `temperature` are sent: every
compatible server accepts them. The client retries 429/5xx/timeouts itself with
backoff; what still fails after that becomes one `LLMError`.
"""

from __future__ import annotations

import itertools
import logging
import math
import ssl
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType

import httpcore2
import httpx2
import openai
from openai.types.chat import ChatCompletion

from shared.infra.deadline import HTTPCORE2, DeadlineBackend, attempt_deadline
from shared.infra.redaction import credentials_of, redact
from shared.llm.accounting import account
from shared.llm.base import (
    CallListener,
    Completion,
    DriftRequest,
    LLMCall,
    LLMError,
    SummaryRequest,
    Usage,
)
from shared.llm.prompts import drift_messages, summary_messages
from shared.llm.telemetry import OPENAI, answered, model_call

log = logging.getLogger(__name__)

# Failures another attempt may fix; the rest (400, 401, 404...) would fail again.
TRANSIENT = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)

# Local servers need no key, but the client refuses to start without one.
NO_API_KEY = "unused"
COMPLETIONS_PATH = "/chat/completions"
MAX_REASON_CHARS = 300


def failure_reason(exc: Exception, *, timeout_s: float, max_retries: int) -> str:
    """One line that says why the call failed, for logs and the evaluation record; the
    key the call carried is redacted from it (a provider's 401 may quote it)."""
    attempts = f"after {max_retries + 1} attempt(s)"
    if isinstance(exc, openai.APITimeoutError):
        text = f"timed out ({timeout_s:g}s per attempt) {attempts}"
    elif isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        text = f"connection failed {attempts}: {type(cause).__name__}: {cause}"
    elif isinstance(exc, openai.APIStatusError):
        text = f"HTTP {exc.status_code} {attempts}: {exc.message}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    # Before the cut: a key cut in half by it would no longer match.
    text = redact(text, credentials_of(getattr(exc, "request", None)))
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


# The openai client's own connection limits; `connection_limits` only ever raises them.
CLIENT_MAX_CONNECTIONS = 1000
CLIENT_MAX_KEEPALIVE = 100
# httpcore probes the socket of every idle connection in a client's pool at each request
# and each response: one client for 128 calls in flight spent a tenth of a gevent
# worker's CPU there (py-spy), and 16 calls a client still a fifth of each call. Calls
# take turns over clients of about this many each (bench.worker_pool: 4 against 16 gave
# 75 against 70 summaries/s, runs alternated).
CALLS_PER_CLIENT = 4


def connection_limits(calls: int) -> httpx2.Limits:
    """The client's default limits, raised so that `calls` calls in flight each keep
    their connection: past 100 the default would close every extra connection after its
    call and open (and TLS-handshake) a new one for the next, CPU a busy worker lacks."""
    return httpx2.Limits(
        max_connections=max(calls, CLIENT_MAX_CONNECTIONS),
        max_keepalive_connections=max(calls, CLIENT_MAX_KEEPALIVE),
    )


def http_client(
    tls: ssl.SSLContext, limits: httpx2.Limits, backend: httpcore2.NetworkBackend | None
) -> httpx2.Client:
    """An openai client's HTTP client; with `backend`, its connections are the backend's
    (an org's server: pinned addresses), with no proxy from the environment and no redirects."""
    if backend is None:
        return openai.DefaultHttpxClient(verify=tls, limits=limits)
    transport = httpx2.HTTPTransport(verify=tls, limits=limits, trust_env=False)
    # httpx2.HTTPTransport takes no network backend; its pool is rebuilt as it builds it
    # (no proxy, HTTP/1.1), with ours, as the webhook client's is (shared/webhooks/deadline.py).
    transport._pool = httpcore2.ConnectionPool(
        ssl_context=tls,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=backend,
    )
    return openai.DefaultHttpxClient(transport=transport, follow_redirects=False, trust_env=False)


class OpenAIProvider:
    """The `LLM` protocol over an OpenAI-compatible chat-completions endpoint."""

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        model: str,
        timeout_s: float,
        max_retries: int,
        max_connections: int = 1,
        on_call: CallListener | None = None,
        network_backend: httpcore2.NetworkBackend | None = None,
        own_model: bool = False,
    ) -> None:
        """`max_connections`: calls this provider may have in flight at once (the worker's
        concurrency); every one of them keeps its connection between calls. `on_call` is
        told of every call made, answered or failed (the usage ledger). `network_backend`
        opens the connections instead of httpcore's own (an org's server: pinned
        addresses, shared/providers/pinning.py); with it, no proxy from the environment
        and no redirects, and one deadline of `timeout_s` for the whole call: connect,
        send and the whole answer, every attempt (shared/infra/deadline.py), so a server
        that drips its answer cannot hold a worker's slot past it. `own_model`: an org's
        own (its calls' metrics say "own")."""
        self.model = model
        self.own_model = own_model
        self.on_call = on_call
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self._deadline = network_backend is not None
        if network_backend is not None:
            network_backend = DeadlineBackend(network_backend, timeouts=HTTPCORE2)
        # Loading the CA bundle takes a tenth of a second or more: once, not per client.
        tls = httpx2.create_ssl_context()
        clients = max(1, math.ceil(max_connections / CALLS_PER_CLIENT))
        # Each client's own share of the calls in flight: its pool keeps that many.
        limits = connection_limits(math.ceil(max_connections / clients))
        self._clients = [
            openai.OpenAI(
                api_key=api_key or NO_API_KEY,
                base_url=base_url,
                timeout=timeout_s,
                max_retries=max_retries,
                http_client=http_client(tls, limits, network_backend),
            )
            for _ in range(clients)
        ]
        self._turns = itertools.cycle(self._clients)

    def summarize(self, request: SummaryRequest) -> Completion:
        """One chat completion for title, summary and include_in_memory (R9, R10)."""
        return self._complete(summary_messages(request), purpose="summarize", org_id=request.org_id)

    def detect_drift(self, request: DriftRequest) -> Completion:
        """One chat completion for {drift, first_message_id, new_title}."""
        return self._complete(
            drift_messages(request), purpose="detect_drift", org_id=request.org_id
        )

    def close(self) -> None:
        """Release the clients' connection pools."""
        for client in self._clients:
            client.close()

    def __enter__(self) -> OpenAIProvider:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _complete(
        self, messages: list[dict[str, str]], *, purpose: str, org_id: uuid.UUID | None
    ) -> Completion:
        with model_call(
            "chat", provider=OPENAI, model=self.model, org_id=org_id, purpose=purpose,
            own_model=self.own_model,
        ) as span:  # fmt: skip
            completion = self._call(messages, purpose=purpose, org_id=org_id)
            answered(span, usage=completion.usage, model=completion.model)
            return completion

    def _call(
        self, messages: list[dict[str, str]], *, purpose: str, org_id: uuid.UUID | None
    ) -> Completion:
        started = time.perf_counter()
        try:
            client = next(self._turns)
            # One deadline for the call where the connections keep to it (an org's server).
            deadline: AbstractContextManager[None] = (
                attempt_deadline(self.timeout_s) if self._deadline else nullcontext()
            )
            # The client's generic POST, not `chat.completions.create`: the same request,
            # retries and errors, without the typed transform `create` runs over its ~40
            # parameters (0.45 of 1.5 ms of CPU per call, in process; 8 % of a gevent
            # worker's, py-spy). The body is plain JSON: nothing to rename or encode.
            with deadline:
                response = client.post(
                    COMPLETIONS_PATH,
                    cast_to=ChatCompletion,
                    body={
                        "model": self.model,
                        "messages": messages,
                        "response_format": {"type": "json_object"},
                        "temperature": 0,
                    },
                )
        # The client wraps transport failures in APIConnectionError/APITimeoutError.
        except openai.OpenAIError as exc:
            reason = failure_reason(exc, timeout_s=self.timeout_s, max_retries=self.max_retries)
            log.warning("LLM %s call to model %s failed: %s", purpose, self.model, reason)
            self._record(purpose, org_id, started, failed=True)
            raise LLMError(reason, retryable=isinstance(exc, TRANSIENT)) from exc
        if not response.choices:
            self._record(purpose, org_id, started, failed=True)
            raise LLMError(f"the {purpose} answer had no choices")
        # Counted as the server says, within bounds (base.MAX_CALL_TOKENS).
        reported = response.usage
        usage = Usage.reported(
            getattr(reported, "prompt_tokens", 0), getattr(reported, "completion_tokens", 0)
        )
        self._record(purpose, org_id, started, usage=usage)
        return Completion(
            text=response.choices[0].message.content or "",
            model=response.model or self.model,
            usage=usage,
        )

    def _record(
        self,
        purpose: str,
        org_id: uuid.UUID | None,
        started: float,
        *,
        usage: Usage | None = None,
        failed: bool = False,
    ) -> None:
        # Labelled with the configured model, not the answer's dated variant, so a
        # failure and a success of the same deployment share a series.
        call = LLMCall(
            org_id=org_id, model=self.model, purpose=purpose, failed=failed,
            usage=usage or Usage(), own_model=self.own_model,
        )  # fmt: skip
        account(call, seconds=time.perf_counter() - started, listener=self.on_call)
