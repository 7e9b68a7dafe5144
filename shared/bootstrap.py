"""The one place that builds what a process needs: engine, sessions, Redis, job queue, LLM.

Every entry point asks for a `Runtime` here — the Flask app, the Celery worker, the CLI,
the MCP server — and hands it on; none wires another. An entry point passes only what is
its own: how it sends jobs (the web's producer or the worker's Celery app: the domain
never imports Celery), how many of its threads share the engine, and, in tests, the
stand-ins it wants instead of the real thing.

Everything is built on first use: a prefork worker child must not inherit its parent's
connections, and a CLI command that never touches Redis should not connect to it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import httpx
import redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.cache import KeyCache
from shared.domain.limits import Limits
from shared.embeddings.provider import Embedder, make_embedder
from shared.embeddings.query import QueryEmbeddings
from shared.infra.config import Settings
from shared.infra.db.engine import (
    POOL_TIMEOUT_S,
    bound_transactions,
    make_engine,
    make_session_factory,
)
from shared.infra.db.uow import UnitOfWork
from shared.infra.fair import FairQueue
from shared.infra.held import HeldJobs
from shared.infra.liveness import Heartbeat, heartbeat_ttl_s
from shared.infra.queue import JobQueue, RecordingQueue
from shared.infra.redis_url import redis_client
from shared.infra.runtime import Endpoints, resolve_endpoints, sealing_keys_of
from shared.infra.sealing import SecretBox
from shared.llm.base import LLM
from shared.llm.factory import make_llm
from shared.orgs.budget import BudgetDefaults, Budgets
from shared.orgs.budgeted_llm import BudgetedLLM
from shared.orgs.ratelimit import RequestLimit, RequestLimiter
from shared.providers.routing import route_by_org
from shared.triggers.debounce import Debouncer
from shared.usage.service import UsageLedger
from shared.webhooks.deadline import webhook_client
from shared.webhooks.policy import Policy

# A request or a CLI command must fail, not hang, when Redis is down (R29: the exit
# triggers degrade to `dropped`); a worker waits on Redis as long as it must.
REQUEST_REDIS_TIMEOUTS = {"socket_connect_timeout": 1, "socket_timeout": 2}
# Redis connections per process. When all are busy a caller waits for one (up to
# REDIS_POOL_WAIT_S), never fails at once: a gevent web runs hundreds of requests and
# live streams' lease renewals on one pool (redis-py's default pool raises beyond 100).
REDIS_CONNECTIONS = 50
REDIS_POOL_WAIT_S = 5


class Runtime:
    """A process's dependencies, built lazily from settings, overridable one by one."""

    def __init__(
        self,
        settings: Settings,
        *,
        endpoints: Endpoints | None = None,
        make_queue: Callable[[Runtime], JobQueue] | None = None,
        queue: JobQueue | None = None,
        session_factory: sessionmaker[Session] | None = None,
        pool_size: int | None = None,
        max_overflow: int | None = None,
        transaction_bounds: tuple[float | None, float] | None = None,
        idle_in_transaction_s: float | None = None,
        request_timeouts: bool = True,
    ) -> None:
        """`make_queue` builds the process's job queue from this runtime; `queue` is a
        ready one (tests); with neither, jobs are recorded, never sent (for commands that
        send none). `pool_size` and
        `max_overflow` default to the settings' connection budget; `transaction_bounds`
        is (lock timeout or None, statement timeout) in seconds for every transaction;
        PostgreSQL ends one idle for `idle_in_transaction_s` (the web's backstop)."""
        self.settings = settings
        self._endpoints = endpoints
        self._make_queue = make_queue
        self._queue = queue
        self._session_factory = session_factory
        self.pool_size = pool_size if pool_size is not None else settings.db_pool_size
        # Tasks or requests of this process that may hold a connection at once; a
        # threaded worker sets it (and the pool size) before its engine is made.
        self.tasks_per_process = 1
        self.max_overflow = max_overflow if max_overflow is not None else settings.db_max_overflow
        # How long a task or request waits for a pooled connection before it fails; a
        # green worker (hundreds of tasks on a few connections) waits longer.
        self.pool_timeout = POOL_TIMEOUT_S
        self._transaction_bounds = transaction_bounds
        self._idle_in_transaction_s = idle_in_transaction_s
        self._request_timeouts = request_timeouts
        self.limits = Limits(
            max_json_depth=settings.max_json_depth,
            searches_per_org=settings.searches_per_org,
            imports_per_org=settings.imports_per_org,
            import_session_bytes=settings.import_session_bytes,
        )

    @cached_property
    def endpoints(self) -> Endpoints:
        """The configured URLs, or the embedded servers' (started if need be)."""
        return self._endpoints or resolve_endpoints(self.settings)

    @cached_property
    def engine(self) -> Engine:
        engine = make_engine(
            self.endpoints.database_url,
            pool_size=self.pool_size,
            max_overflow=self.max_overflow,
            pool_timeout=self.pool_timeout,
        )
        if self._transaction_bounds is not None or self._idle_in_transaction_s is not None:
            lock_timeout_s, statement_timeout_s = self._transaction_bounds or (None, None)
            bound_transactions(
                engine, lock_timeout_s=lock_timeout_s, statement_timeout_s=statement_timeout_s,
                idle_in_transaction_s=self._idle_in_transaction_s,
            )  # fmt: skip
        return engine

    @cached_property
    def session_factory(self) -> sessionmaker[Session]:
        return self._session_factory or make_session_factory(self.engine)

    @cached_property
    def queue(self) -> JobQueue:
        if self._queue is not None:
            return self._queue
        if self._make_queue is not None:
            return self._make_queue(self)
        return RecordingQueue()

    @cached_property
    def fair(self) -> FairQueue:
        """The orgs' lists of model jobs (shared/infra/fair.py), beside the debounce state:
        a job waits where the web and every worker see it."""
        return FairQueue(self.redis)

    @cached_property
    def held(self) -> HeldJobs:
        """Where model jobs are held (shared/infra/held.py): the reconciler's question."""
        return HeldJobs(self.redis)

    @cached_property
    def heartbeat(self) -> Heartbeat:
        """This process's heartbeat, while it runs model jobs (shared/infra/liveness.py)."""
        return Heartbeat(lambda: self.redis, ttl_s=heartbeat_ttl_s(self.settings.reconcile_s))

    @cached_property
    def redis(self) -> redis.Redis:
        timeouts = REQUEST_REDIS_TIMEOUTS if self._request_timeouts else {}
        return redis_client(
            self.endpoints.redis_url,
            max_connections=REDIS_CONNECTIONS,
            pool_wait_s=REDIS_POOL_WAIT_S,
            **timeouts,
        )

    @cached_property
    def llm(self) -> LLM:
        # The rate limit's bucket lives in the same Redis as the debounce state.
        # Every task of the process may have a call in flight (the HTTP connection pool).
        # Each call the provider makes is written to the usage ledger as it returns.
        ledger = UsageLedger(self.unit_of_work)
        # No quota is waited for in a worker's slot: a call without room raises at once,
        # and its org yields its turn in the fair queue until there is (worker/fair.py).
        fleet = make_llm(
            self.settings, redis_client=self.redis, calls=self.tasks_per_process,
            on_call=ledger, max_wait_s=0,
        )  # fmt: skip
        # An org that set its own model (bring your own key) has its calls go there.
        provider = route_by_org(
            fleet, settings=self.settings, new_uow=self.unit_of_work, box=self.secret_box,
            calls=self.tasks_per_process, on_call=ledger, redis_client=self.redis,
        )  # fmt: skip
        # Outermost: a call of an org past its budget is refused before it takes from
        # the fleet's bucket or reaches a model (shared/orgs/budgeted_llm.py).
        budgets = Budgets(self.unit_of_work, defaults=self.budget_defaults, redis_client=self.redis)
        return BudgetedLLM(provider, budgets=budgets, redis_client=self.redis, max_wait_s=0)

    @cached_property
    def embedder(self) -> Embedder | None:
        """Texts' vectors (each org's from its own server, if it set one); None when
        DRIFTLESS_EMBEDDINGS=none: search stays lexical."""
        return make_embedder(self.settings, new_uow=self.unit_of_work, box=self.secret_box)

    @cached_property
    def query_vectors(self) -> QueryEmbeddings | None:
        """A search query's vector, under its deadline and cached (None: searches are
        lexical): HTTP search and the recall tool, over HTTP and MCP, share it."""
        embedder = self.embedder
        if embedder is None:
            return None
        return QueryEmbeddings(embedder, self.redis)

    @property
    def budget_defaults(self) -> BudgetDefaults:
        """The fleet's LLM budget of an org without its own."""
        settings = self.settings
        return BudgetDefaults(
            llm_rpm=settings.org_llm_rpm, monthly_tokens=settings.org_monthly_tokens
        )

    @cached_property
    def debouncer(self) -> Debouncer:
        return Debouncer.from_settings(self.redis, self.settings)

    @cached_property
    def key_cache(self) -> KeyCache:
        return KeyCache(ttl_s=self.settings.auth_cache_s, unit_of_work=self.unit_of_work)

    @cached_property
    def request_limiter(self) -> RequestLimiter:
        """Each org's request bucket (in this Redis); an org's own limit comes with its key."""
        settings = self.settings
        default = RequestLimit(per_s=settings.org_requests_per_s, burst=settings.org_request_burst)
        return RequestLimiter(self.redis, default=default)

    @cached_property
    def secret_box(self) -> SecretBox:
        """Seals and opens stored secrets; without keys it opens only `plain:` rows and
        refuses to seal (shared/infra/sealing.py)."""
        return SecretBox(sealing_keys_of(self.settings))

    @cached_property
    def webhook_policy(self) -> Policy:
        settings = self.settings
        return Policy(
            max_attempts=settings.webhook_max_attempts,
            backoff_s=settings.webhook_backoff_s,
            timeout_s=settings.webhook_timeout_s,
            allow_private=settings.webhook_allow_private,
        )

    @cached_property
    def webhook_http(self) -> httpx.Client:
        # One pool per process: a receiver's keep-alive connection serves its next event.
        # Every task of the process may have an attempt in flight.
        calls = max(self.tasks_per_process, 1)
        limits = httpx.Limits(max_connections=calls, max_keepalive_connections=min(calls, 20))
        # Each attempt ends by its one deadline (shared/infra/deadline.py).
        return webhook_client(limits=limits)

    def build(self) -> Runtime:
        """Build everything now: a threaded server must not race to build it on first use,
        and a bad URL should stop the process at start (the sealing keys' line, deprecated
        or overridden, is logged at start too)."""
        parts = ("engine", "session_factory", "queue", "redis", "debouncer", "key_cache")
        for part in (*parts, "secret_box"):
            getattr(self, part)
        return self

    def unit_of_work(self) -> UnitOfWork:
        """One transaction; its jobs go out through this process's queue after the commit."""
        return UnitOfWork(self.session_factory, self.queue, self.limits, self.redis)

    def close(self) -> None:
        """Give back the connections this runtime opened (a CLI command at its end)."""
        if "engine" in self.__dict__:
            self.engine.dispose()
        if "redis" in self.__dict__:
            self.redis.close()
        if "webhook_http" in self.__dict__:
            self.webhook_http.close()
