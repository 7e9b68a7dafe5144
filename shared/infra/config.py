"""Typed settings built once from the environment (docs/contract.md, "Environment")."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shared.domain.limits import ORG_LIMITS
from shared.infra.crontab import parse_crontab
from shared.infra.redis_url import check_redis_url, is_sentinel, parse_sentinel_url
from shared.infra.sealing import parse_keys

DEFAULT_LLM_MODEL = "gpt-4o-mini"
DEFAULT_EMBEDDINGS_MODEL = "text-embedding-3-small"

# Environment variable -> settings field. Spelled out rather than derived so that
# grepping for a variable name lands here.
ENVIRONMENT: dict[str, str] = {
    "DATABASE_URL": "database_url",
    "REDIS_URL": "redis_url",
    "CELERY_BROKER_URL": "broker_url",
    "PORT": "port",
    "OPENAI_API_KEY": "openai_api_key",
    "OPENAI_BASE_URL": "openai_base_url",
    "DRIFTLESS_LLM": "llm",
    "DRIFTLESS_LLM_MODEL": "llm_model",
    "DRIFTLESS_LLM_TIMEOUT_S": "llm_timeout_s",
    "DRIFTLESS_LLM_MAX_RETRIES": "llm_max_retries",
    "DRIFTLESS_EMBEDDINGS": "embeddings",
    "DRIFTLESS_EMBEDDINGS_BASE_URL": "embeddings_base_url",
    "DRIFTLESS_EMBEDDINGS_API_KEY": "embeddings_api_key",
    "DRIFTLESS_EMBEDDINGS_MODEL": "embeddings_model",
    "DRIFTLESS_EMBEDDINGS_DIMENSIONS": "embeddings_dimensions",
    "DRIFTLESS_DEBOUNCE_MS": "debounce_ms",
    "DRIFTLESS_DEBOUNCE_MAX_WAIT_MS": "debounce_max_wait_ms",
    "DRIFTLESS_SWEEP_S": "sweep_s",
    "DRIFTLESS_IDLE_S": "idle_s",
    "DRIFTLESS_DRIFT_INTERVAL": "drift_interval",
    "DRIFTLESS_WINDOW": "window",
    "DRIFTLESS_WINDOW_MODE": "window_mode",
    "DRIFTLESS_WINDOW_BLOCK": "window_block",
    "DRIFTLESS_SCAN_BACK": "scan_back",
    "DRIFTLESS_MEMORY_TOKEN_BUDGET": "memory_token_budget",
    "DRIFTLESS_RECONCILE_S": "reconcile_s",
    "DRIFTLESS_HOME": "home",
    "DRIFTLESS_MAX_BODY_BYTES": "max_body_bytes",
    "DRIFTLESS_MAX_JSON_DEPTH": "max_json_depth",
    "DRIFTLESS_MAX_STREAMS_PER_ORG": "max_streams_per_org",
    "DRIFTLESS_AUTH_CACHE_S": "auth_cache_s",
    "DRIFTLESS_STREAM_IDLE_S": "stream_idle_s",
    "DRIFTLESS_STREAM_MAX_S": "stream_max_s",
    "DRIFTLESS_LLM_RPM": "llm_rpm",
    "DRIFTLESS_LLM_TPM": "llm_tpm",
    "DRIFTLESS_RETENTION_S": "retention_s",
    "DRIFTLESS_RETENTION_SWEEP_S": "retention_sweep_s",
    "DRIFTLESS_DB_POOL_SIZE": "db_pool_size",
    "DRIFTLESS_DB_MAX_OVERFLOW": "db_max_overflow",
    "DRIFTLESS_WORKER_METRICS_PORT": "worker_metrics_port",
    "DRIFTLESS_REEVALUATE_CRON": "reevaluate_cron",
    "DRIFTLESS_WEBHOOK_MAX_ATTEMPTS": "webhook_max_attempts",
    "DRIFTLESS_WEBHOOK_BACKOFF_S": "webhook_backoff_s",
    "DRIFTLESS_WEBHOOK_TIMEOUT_S": "webhook_timeout_s",
    "DRIFTLESS_WEBHOOK_ALLOW_PRIVATE": "webhook_allow_private",
    "DRIFTLESS_PROVIDER_ALLOW_PRIVATE": "provider_allow_private",
    "DRIFTLESS_SECRET_KEYS": "secret_keys",
    "DRIFTLESS_WEBHOOK_KEYS": "webhook_keys",  # the old name of DRIFTLESS_SECRET_KEYS
    "DRIFTLESS_ORG_REQUESTS_PER_S": "org_requests_per_s",
    "DRIFTLESS_ORG_REQUEST_BURST": "org_request_burst",
    "DRIFTLESS_ORG_LLM_RPM": "org_llm_rpm",
    "DRIFTLESS_ORG_MONTHLY_TOKENS": "org_monthly_tokens",
    "DRIFTLESS_WEB_STATEMENT_TIMEOUT_MS": "web_statement_timeout_ms",
    "DRIFTLESS_SEARCHES_PER_ORG": "searches_per_org",
    "DRIFTLESS_WEBHOOKS_PER_ORG": "webhooks_per_org",
    "DRIFTLESS_EMBEDDINGS_PER_ORG": "embeddings_per_org",
    "DRIFTLESS_CAMPAIGNS_PER_ORG": "campaigns_per_org",
    # Imports and exports ([4.1]): what waits on a client, and for how long.
    "DRIFTLESS_IMPORTS_PER_ORG": "imports_per_org",
    "DRIFTLESS_IMPORT_SESSION_BYTES": "import_session_bytes",
    "DRIFTLESS_CLIENT_STALL_S": "client_stall_s",
    "DRIFTLESS_WEB_IDLE_IN_TRANSACTION_MS": "web_idle_in_transaction_ms",
    "DRIFTLESS_OWN_MODEL_CALLS_PER_ORG": "own_model_calls_per_org",
    "LOG_FORMAT": "log_format",
}
FIELD_TO_VARIABLE = {field: var for var, field in ENVIRONMENT.items()}


class ConfigError(Exception):
    """A bad environment value; the message names the variable."""


class Settings(BaseModel):
    """Everything a process reads from its environment, validated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str | None = None
    redis_url: str | None = None
    broker_url: str | None = None
    port: int = Field(default=8000, ge=1, le=65535)
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    llm: Literal["openai", "local"] | None = None
    llm_model: str = Field(default=DEFAULT_LLM_MODEL, min_length=1)
    # Per attempt. 429/5xx/timeouts are retried with backoff: by the openai client, or,
    # under a rate limit, by RateLimitedLLM so that every attempt is charged (ratelimit.py).
    llm_timeout_s: float = Field(default=30.0, gt=0, le=600)
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    # Recall by meaning (shared/embeddings/): `none` keeps search lexical. The server and
    # key default to the model's (OPENAI_BASE_URL, OPENAI_API_KEY); `dimensions` is sent
    # only when set (text-embedding-3 models shorten their vectors to it).
    embeddings: Literal["none", "openai"] = "none"
    embeddings_base_url: str | None = None
    embeddings_api_key: str | None = Field(default=None, repr=False)
    embeddings_model: str = Field(default=DEFAULT_EMBEDDINGS_MODEL, min_length=1)
    embeddings_dimensions: int | None = Field(default=None, ge=1, le=16_000)
    debounce_ms: int = Field(default=2000, ge=0, le=600_000)
    # An endless stream of triggers still evaluates at least this often.
    debounce_max_wait_ms: int = Field(default=10_000, ge=0, le=3_600_000)
    # The beat sweep: every sweep_s, evaluate topics idle for idle_s with unsummarized messages.
    sweep_s: int = Field(default=300, ge=1)
    idle_s: int = Field(default=900, ge=1)
    drift_interval: int = Field(default=10, ge=1)
    window: int = Field(default=20, ge=1, le=1000)
    # block: the thread's start moves only in steps of window_block, so the provider's
    # prompt cache reaches into the thread between steps (bench/prefix_reuse.py).
    window_mode: Literal["block", "sliding"] = "block"
    window_block: int = Field(default=10, ge=1, le=1000)
    scan_back: int = Field(default=10, ge=1, le=1000)
    memory_token_budget: int = Field(default=2000, ge=0)
    reconcile_s: int = Field(default=60, ge=1)
    # Where embedded PostgreSQL and Redis keep their files when no URL is given.
    home: Path = Path(".driftless")
    # A batch of 1,000 messages of about 2 KB each (POST …/messages); one message is far less.
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    # Deeper JSON is refused (422) on every path before anything is written: nesting is
    # never needed by the API's documents and recursion is what breaks on it.
    max_json_depth: int = Field(default=32, ge=2, le=200)
    # Live event streams (GET …/events): open ones per org across the fleet, and how
    # long one may stay without an event (idle) or at all before the server ends it.
    max_streams_per_org: int = Field(default=20, ge=1, le=100_000)
    # How long a process trusts a key it has looked up: a revoked key works at most this
    # long after `driftless keys revoke` (0: look it up on every request).
    auth_cache_s: float = Field(default=5.0, ge=0, le=300)
    stream_idle_s: int = Field(default=300, ge=1)
    stream_max_s: int = Field(default=3600, ge=1)
    # The provider's quota, shared by the whole worker fleet through Redis; 0: no limit.
    llm_rpm: int = Field(default=0, ge=0)
    llm_tpm: int = Field(default=0, ge=0)
    # Sessions idle longer than retention_s lose their raw messages and archived notes
    # (titles and summaries stay); 0 keeps everything. Checked every retention_sweep_s.
    retention_s: int = Field(default=30 * 86_400, ge=0)
    retention_sweep_s: int = Field(default=3600, ge=1)
    # Per process: PostgreSQL sees at most processes x (pool + overflow) connections.
    db_pool_size: int = Field(default=5, ge=1, le=100)
    db_max_overflow: int = Field(default=5, ge=0, le=100)
    # A worker's Prometheus endpoint (all its pool processes); 0 turns it off.
    worker_metrics_port: int = Field(default=9808, ge=0, le=65535)
    # When set, beat starts a re-evaluation campaign on this schedule (a 5-field crontab
    # line, UTC) over topics summarized by an older prompt version or model.
    reevaluate_cron: str | None = None
    # Webhook deliveries (shared/webhooks/): attempts before a delivery is dead, the
    # first retry's delay (doubling, with jitter, up to 6 h), one attempt's deadline (its
    # connect, send and answer headers, every hop, together; the delivery job's hard time
    # limit and the claim's lease are derived from it: shared/webhooks/delivery.py).
    webhook_max_attempts: int = Field(default=12, ge=1, le=100)
    webhook_backoff_s: float = Field(default=5.0, gt=0, le=21_600)
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=120)
    # Loopback, private and link-local targets are refused unless this is set (a dev box).
    webhook_allow_private: bool = False
    # The same for orgs' own model and embeddings servers (`PUT /agents-api/provider`).
    # Unset: DRIFTLESS_WEBHOOK_ALLOW_PRIVATE's value, which governed both before they
    # were told apart (`providers_may_be_private`).
    provider_allow_private: bool | None = None
    # Fernet keys, comma-separated, that seal stored secrets (webhook secrets, orgs' model
    # keys) in the database: the first seals, all open (rotation). Unset: storing a
    # secret is refused (shared/infra/sealing.py). `webhook_keys` is the deprecated name,
    # read when `secret_keys` is unset (shared/infra/runtime.py: sealing_keys_of).
    secret_keys: str | None = Field(default=None, repr=False)
    webhook_keys: str | None = Field(default=None, repr=False)
    # Fair share between orgs ([3.2]): each limit is a 429 with Retry-After past it.
    # Requests per org, a token bucket across the web fleet (0: no limit); the default
    # lets a batch import at full speed (about 110 requests of 500 messages a second) by.
    org_requests_per_s: float = Field(default=1000.0, ge=0)
    org_request_burst: int = Field(default=2000, ge=1)
    # Each org's LLM budget (shared/orgs/budget.py), unless `driftless orgs set` gives it
    # its own: model calls a minute, waited for in the worker; tokens a calendar month
    # (UTC), past which its summaries fall back (R14) and drift is not asked. 0: none.
    org_llm_rpm: int = Field(default=0, ge=0)
    org_monthly_tokens: int = Field(default=0, ge=0)
    # The web's queries end after this long (0: never), so no request holds a pooled
    # connection for long; searches open at once per org.
    web_statement_timeout_ms: int = Field(default=5000, ge=0)
    searches_per_org: int = Field(default=4, ge=1, le=1000)
    # Webhook attempts in flight per org across the fleet: a quarter of a worker's 128
    # slots, so one org's slow receivers leave the rest to others.
    webhooks_per_org: int = Field(default=32, ge=1, le=10_000)
    # Calls in flight per org to its own embeddings server across the fleet, a quarter of a
    # worker's slots too: an org at its cap leaves its texts for later (embeddings/slots.py).
    embeddings_per_org: int = Field(default=32, ge=1, le=10_000)
    # Re-evaluation campaigns running at once per org.
    campaigns_per_org: int = Field(default=2, ge=1, le=100)
    # Imports and exports ([4.1]). Imports over HTTP at once per org, across the fleet
    # (the CLI's are an operator's, not counted); one session's lines held in memory
    # until written in one short transaction (a larger session is a 413).
    imports_per_org: int = Field(default=2, ge=1, le=1000)
    import_session_bytes: int = Field(default=64 * 1024 * 1024, ge=1024 * 1024)
    # The web ends an import or export whose client neither sends nor reads for this long.
    client_stall_s: float = Field(default=30.0, gt=0, le=3600)
    # PostgreSQL ends a web transaction left idle this long (0: never): the backstop
    # should any request hold one while it waits on something else.
    web_idle_in_transaction_ms: int = Field(default=60_000, ge=0)
    # Calls in flight per org to its own model across the fleet: a quarter of a worker's
    # 128 slots, as webhooks, so one org's slow model leaves the rest to others.
    own_model_calls_per_org: int = Field(default=32, ge=1, le=10_000)
    log_format: Literal["json", "text"] = "json"

    @model_validator(mode="after")
    def _block_fits_window(self) -> Settings:
        if self.window_block > self.window:
            raise ValueError(
                f"DRIFTLESS_WINDOW_BLOCK={self.window_block}"
                f" must not exceed DRIFTLESS_WINDOW={self.window}"
            )
        return self

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_only(cls, value: str | None) -> str | None:
        if value is not None:
            check_redis_url(value)
        return value

    @field_validator("broker_url")
    @classmethod
    def _sentinel_broker(cls, value: str | None) -> str | None:
        # Any Celery broker goes; our Sentinel form is ours to check.
        if value is not None and is_sentinel(value):
            parse_sentinel_url(value)
        return value

    @field_validator("org_requests_per_s", "org_request_burst", "org_llm_rpm", "org_monthly_tokens")
    @classmethod
    def _org_limit(cls, value: float, info: ValidationInfo) -> float:
        # The fleet's default within the range an org's own is held to (`driftless orgs set`).
        limit = ORG_LIMITS[str(info.field_name).removeprefix("org_")]
        if not limit.allows(value):
            raise ValueError(f"must be {limit.range()}")
        return value

    @field_validator("secret_keys", "webhook_keys")
    @classmethod
    def _fernet_keys(cls, value: str | None) -> str | None:
        if value is not None:
            parse_keys(value)
        return value

    @field_validator("reevaluate_cron")
    @classmethod
    def _crontab_line(cls, value: str | None) -> str | None:
        if value is not None:
            parse_crontab(value)
        return value

    @property
    def llm_provider(self) -> Literal["openai", "local"]:
        """`openai` when a key is set and nothing else was asked for, else `local`."""
        if self.llm is not None:
            return self.llm
        return "openai" if self.openai_api_key else "local"

    @property
    def providers_may_be_private(self) -> bool:
        """Whether an org's own model or embeddings server may be on a loopback or private
        address: DRIFTLESS_PROVIDER_ALLOW_PRIVATE, else DRIFTLESS_WEBHOOK_ALLOW_PRIVATE."""
        if self.provider_allow_private is not None:
            return self.provider_allow_private
        return self.webhook_allow_private


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from `environ` (default: the process environment)."""
    environ = os.environ if environ is None else environ
    raw = {
        field: environ[var]
        for var, field in ENVIRONMENT.items()
        if environ.get(var, "").strip() != ""
    }
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            if not error["loc"]:  # a rule across variables; its message names them
                problems.append(str(error["msg"]).removeprefix("Value error, "))
                continue
            field = str(error["loc"][0])
            variable = FIELD_TO_VARIABLE.get(field, field)
            problems.append(f"{variable}={raw.get(field)!r}: {error['msg']}")
        raise ConfigError("bad configuration: " + "; ".join(problems)) from None


def load_settings_or_exit(environ: Mapping[str, str] | None = None) -> Settings:
    """load_settings for process entry points: a bad value ends the process with its message."""
    try:
        return load_settings(environ)
    except ConfigError as exc:
        raise SystemExit(f"driftless: {exc}") from None
