"""Prometheus metrics of domain events, counted where they happen (web or worker).

Each process exports its own registry: the web at `/metrics`, the worker on its metrics
port (prometheus-client's multiprocess mode sums a prefork worker's children). A change
that belongs to a transaction is counted with `count_on_commit`, so a rolled-back
transaction counts nothing and a retried one counts once.

A counter whose label values are a known, finite set (statuses, outcomes) starts each
series at 0 (`at_zero`, with the table of values beside it): a series that appears with
its first event has no rate until its second, so its dashboard panel says "No data" and
an alert on `increase()` misses that first event. Counters labelled by model are not:
their values are open-ended.

No label takes a value a tenant chooses (a model name, an agent id, a query) or names a
tenant (an org's id: one tenant's work is in its traces, shared/infra/tracing.py): each
value is a series in every scrape, for as long as the process lives. The model label is the
fleet's DRIFTLESS_LLM_MODEL (or `local`), or OWN_MODEL for any org's own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from prometheus_client import Counter, Histogram
from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction


def at_zero(counter: Counter, combinations: Iterable[Sequence[str]]) -> Counter:
    """`counter`, with the series of each known combination of label values at 0."""
    for values in combinations:
        counter.labels(*values)
    return counter


# Labelled by task: their table, TASK_ROUTES, is in shared.infra.queue, which counts them
# (and so imports this module); worker.metrics starts them at 0.
JOBS_ENQUEUED = Counter(
    "driftless_jobs_enqueued_total", "Jobs handed to the broker, by task", ["task"]
)
JOBS_SEND_FAILED = Counter(
    "driftless_jobs_send_failed_total",
    "Jobs the broker refused (after a commit the reconciler re-enqueues them)",
    ["task"],
)
LLM_CALLS = Counter(
    "driftless_llm_calls_total",
    "LLM calls by model, purpose (summarize, detect_drift) and outcome (ok, error)",
    ["model", "purpose", "outcome"],
)
LLM_TOKENS = Counter(
    "driftless_llm_tokens_total",
    "Tokens of answered LLM calls by model, purpose and kind (prompt, completion)",
    ["model", "purpose", "kind"],
)
# No org label: orgs are unbounded, and what an org used is the ledger's to say
# (GET /agents-api/usage, from PostgreSQL), what it did its traces' (driftless.org_id).
# The model label of a call to an org's own model (PUT /agents-api/provider), whatever
# its name: an org may name a new model on every call it configures.
OWN_MODEL = "own"
# From a local server's milliseconds to a slow provider's minutes (the task limit is 300 s).
LLM_SECONDS = Histogram(
    "driftless_llm_call_seconds",
    "Wall time of an LLM call, the client's own retries included",
    ["model", "purpose"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
)
# (call, reason): a summary's answer that failed or was unusable; a drift check that failed.
FALLBACK_REASONS = (
    ("summarize", "llm_error"),
    ("summarize", "unusable_answer"),
    ("detect_drift", "llm_error"),
)
FALLBACKS = at_zero(
    Counter(
        "driftless_fallbacks_total",
        "Answers replaced by a fallback: a summary from the first user message, or no drift",
        ["call", "reason"],
    ),
    FALLBACK_REASONS,
)
MEMORY_CHANGE_KINDS = ("promoted", "demoted", "deprecated", "undeprecated")
MEMORY_ACTORS = ("user", "agent", "summarizer")  # shared.curation.rules.Actor
MEMORY_CHANGES = at_zero(
    Counter(
        "driftless_memory_changes_total",
        "Committed curation changes (promoted, demoted, deprecated, undeprecated) by actor",
        ["change", "actor"],
    ),
    itertools.product(MEMORY_CHANGE_KINDS, MEMORY_ACTORS),
)
FORKS = Counter("driftless_forks_total", "Silent forks committed (R6)")
# The triggers that go through the debounce: the exit triggers a client sends (and the
# web's disconnect), and the idle sweep. A heartbeat evaluates without one.
DEBOUNCED_TRIGGERS = ("navigation", "visibility", "disconnect", "manual", "sweep")
DEBOUNCE_OUTCOMES = ("scheduled", "coalesced", "suppressed", "dropped")  # triggers.EvaluateStatus
DEBOUNCE = at_zero(
    Counter(
        "driftless_debounce_triggers_total",
        "Evaluation triggers by trigger and debounce outcome (scheduled, coalesced, suppressed,"
        " dropped)",
        ["trigger", "outcome"],
    ),
    itertools.product(DEBOUNCED_TRIGGERS, DEBOUNCE_OUTCOMES),
)
# Re-evaluation campaigns' topics: enqueued by the pump, then settled done or failed.
REEVALUATION_OUTCOMES = ("enqueued", "done", "failed")
REEVALUATION_TOPICS = at_zero(
    Counter(
        "driftless_reevaluation_topics_total",
        "Topics of re-evaluation campaigns by outcome (enqueued; then done, or failed for good)",
        ["outcome"],
    ),
    [(outcome,) for outcome in REEVALUATION_OUTCOMES],
)

# Webhook attempts by what they led to: delivered, failed (retried later) or dead (given
# up after DRIFTLESS_WEBHOOK_MAX_ATTEMPTS); counted in the worker that made the attempt.
WEBHOOK_STATUSES = ("delivered", "failed", "dead")
WEBHOOK_DELIVERIES = at_zero(
    Counter(
        "driftless_webhook_deliveries_total",
        "Webhook delivery attempts by the status they left the delivery in (delivered, failed,"
        " dead)",
        ["status"],
    ),
    [(status,) for status in WEBHOOK_STATUSES],
)
# Per-org limits ([3.2]): each refusal, by the kind of work refused.
# llm_rpm: a model call that had to wait for its org's calls a minute; monthly_tokens: one
# refused for its org's tokens this month (shared/orgs/budget.py).
LIMIT_KINDS = (
    "requests",
    "searches",
    "exports",
    "imports",
    "webhooks",
    "campaigns",
    "llm_rpm",
    "monthly_tokens",
    "embeddings",
    "own_model_calls",
)
LIMIT_HITS = at_zero(
    Counter(
        "driftless_limit_hits_total",
        "Requests refused by a per-org limit, by kind",
        ["kind"],
    ),
    [(kind,) for kind in LIMIT_KINDS],
)
# A search query's vector (shared/embeddings/query.py): from the cache, embedded in time,
# or none (failed, past its deadline, or invalid: not of the model's size, or not finite),
# and the search stays lexical.
QUERY_EMBEDDING_RESULTS = ("cached", "embedded", "failed", "timeout", "invalid")
QUERY_EMBEDDINGS = at_zero(
    Counter(
        "driftless_query_embeddings_total",
        "Search queries' embeddings by result (cached, embedded, failed, timeout, invalid)",
        ["result"],
    ),
    [(result,) for result in QUERY_EMBEDDING_RESULTS],
)
# Vectors the workers made (shared/embeddings/batch.py), by kind and result: a failed
# text is left for the job's retry, the reconciler or a backfill.
EMBEDDING_KINDS = ("message", "topic")
# failed: the server failed; invalid: it answered vectors that cannot be stored (another
# size than the model's, too long, not finite); deferred: the org was at its cap of calls
# to its own server, or the model's size was not known yet.
EMBEDDING_RESULTS = ("stored", "failed", "invalid", "deferred")
EMBEDDINGS = at_zero(
    Counter(
        "driftless_embeddings_total",
        "Texts embedded by the workers, by kind (message, topic) and result (stored, failed,"
        " invalid, deferred)",
        ["kind", "result"],
    ),
    [(kind, result) for kind in EMBEDDING_KINDS for result in EMBEDDING_RESULTS],
)
# No org label: orgs are unbounded. Which org it was is in the log and the org's webhook.
BUDGETS_EXHAUSTED = Counter(
    "driftless_org_budgets_exhausted_total",
    "Orgs that ran out of their monthly LLM tokens (each org once a month)",
)
WEBHOOK_ATTEMPT_SECONDS = Histogram(
    "driftless_webhook_attempt_seconds",
    "Wall time of one webhook attempt (every redirect hop included)",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


def record_llm_call(
    *,
    model: str,
    purpose: str,
    seconds: float,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    failed: bool = False,
) -> None:
    """One LLM call: its outcome, its latency and (when answered) its tokens."""
    outcome = "error" if failed else "ok"
    LLM_CALLS.labels(model, purpose, outcome).inc()
    LLM_SECONDS.labels(model, purpose).observe(seconds)
    if not failed:
        LLM_TOKENS.labels(model, purpose, "prompt").inc(prompt_tokens)
        LLM_TOKENS.labels(model, purpose, "completion").inc(completion_tokens)


# --- counting what a transaction did, once it committed ------------------------------

_PENDING = "driftless_metrics_pending"


def count_on_commit(session: Session, counter: Counter, amount: float = 1) -> None:
    """Increment `counter` when the session's transaction commits; never if it does not."""
    session.info.setdefault(_PENDING, []).append((counter, amount))


@event.listens_for(Session, "after_commit")
def _count_committed(session: Session) -> None:
    for counter, amount in session.info.pop(_PENDING, []):
        counter.inc(amount)


@event.listens_for(Session, "after_transaction_end")
def _forget_uncommitted(session: Session, transaction: SessionTransaction) -> None:
    # after_commit has already run for a committed transaction; whatever is left here was
    # rolled back or abandoned (a unit of work closed without commit).
    if transaction.parent is None:
        session.info.pop(_PENDING, None)
