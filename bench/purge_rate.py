"""bench/purge_rate: the webhook events purge against the most events the request limit lets in.

Inflow: `--clients` orgs, each with a facts.changed subscription and one client (a thread
with a keep-alive connection) that PUTs facts against the real web server (the Procfile's
command) as fast as the org's request limit allows (DRIFTLESS_ORG_REQUESTS_PER_S, paced so
that no request is refused). Each PUT writes one event holding the whole facts document,
`--document-kb` of random text set by each client's first request; events/s counts the
events written over the time from the first timed PUT to the last answer.

Purge: `--backlog` events past their retention (copies of the inflow's, each with its
delivery), deleted by purge_old_events passes as the dispatcher runs them: batches of
PURGE_BATCH, each its own transaction, for PURGE_PASS_S a pass. Its events/s is while a
pass runs; a pass every DRIFTLESS_RECONCILE_S keeps up with that rate times the pass's
share of the period. The ratio of that to the inflow is above 1 when the purge keeps up.

The request limit is per org and the fleet has none, so the events the limits let in
grow with the orgs writing at once until the web fleet is what holds them back: the
inflow is what `--clients` clients get through one web server on this machine, and the
last column says how many orgs writing at the full limit the purge keeps up with.

    .venv/bin/python -m bench.purge_rate [--clients 8] [--puts 400] [--document-kb 32]
        [--backlog 50000]

The last line is machine-readable (`key=value` pairs).
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import math
import os
import time

from sqlalchemy import text

from bench.common import BenchEnv, arguments, bench_env, machine
from bench.http_throughput import Request, run_phase, web_server
from shared.auth.service import create_api_key, org_for_key
from shared.infra.config import Settings
from shared.webhooks.events import (
    FACTS_CHANGED,
    PURGE_BATCH,
    PURGE_PASS_S,
    RETENTION,
    purge_old_events,
)
from shared.webhooks.models import Webhook

MAX_VALUE_BYTES = 15_000  # a fact's value may hold 16 KiB (shared/domain/limits.py)
BACKLOG_CHUNK = 10_000  # backlog rows inserted per transaction

# Copies of each org's latest event, created past the retention, each with its delivery.
_BACKLOG = text(
    """
    WITH latest AS (
        SELECT DISTINCT ON (e.org_id) e.org_id, e.agent_id, e.user_id, e.type, e.body, d.webhook_id
        FROM webhook_events e JOIN webhook_deliveries d ON d.event_id = e.id
        ORDER BY e.org_id, e.created_at DESC
    ), copies AS (
        INSERT INTO webhook_events (id, org_id, agent_id, user_id, type, body, created_at)
        SELECT gen_random_uuid(), org_id, agent_id, user_id, type, body, :at
        FROM latest, generate_series(1, :per_org)
        RETURNING id, org_id
    )
    INSERT INTO webhook_deliveries (webhook_id, event_id)
    SELECT latest.webhook_id, copies.id FROM copies JOIN latest USING (org_id)
    """
)


def setting(name: str, variable: str) -> float:
    """A setting as the web and the worker read it: the environment, else the default."""
    default = Settings.model_fields[name].default
    return float(os.environ.get(variable, default))


def subscribed_orgs(env: BenchEnv, count: int) -> list[str]:
    """Keys of `count` orgs, each subscribed to facts.changed (no worker delivers them)."""
    keys = [env.org_key]
    with env.uow() as uow:
        keys += [create_api_key(uow=uow, org_name=f"bench-{i}") for i in range(1, count)]
        for key in keys:
            org_id = org_for_key(uow=uow, key=key)
            assert org_id is not None
            uow.session.add(
                Webhook(
                    org_id=org_id, url="http://127.0.0.1:9/", events=[FACTS_CHANGED],
                    sealed_secret="-",
                )
            )  # fmt: skip
        uow.commit()
    return keys


def document(size_kb: int) -> dict[str, str]:
    """`size_kb` KiB of random text in facts of at most MAX_VALUE_BYTES (barely compressible,
    as a real document's values mostly are not repeats of each other)."""
    size = size_kb * 1024
    return {
        f"note-{i}": base64.b64encode(os.urandom(MAX_VALUE_BYTES * 3 // 4)).decode()[
            : min(MAX_VALUE_BYTES, size - i * MAX_VALUE_BYTES)
        ]
        for i in range(math.ceil(size / MAX_VALUE_BYTES))
    }


def put_facts(key: str, size_kb: int) -> Request:
    """The first request sets the document; every later one changes one fact of it."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    path = "/agents-api/facts?agentId=bench&userId=user-1"

    def put(connection: http.client.HTTPConnection, number: int) -> None:
        facts = document(size_kb) if number == 0 else {"counter": number}
        connection.request("PUT", path, body=json.dumps(facts), headers=headers)
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")

    return put


def count_events(env: BenchEnv) -> int:
    with env.uow() as uow:
        return int(uow.session.scalar(text("SELECT count(*) FROM webhook_events")) or 0)


def add_backlog(env: BenchEnv, orgs: int, total: int, now: dt.datetime) -> int:
    """About `total` events past their retention, in chunks; returns how many."""
    due = now - RETENTION - dt.timedelta(days=1)
    added = 0
    while added < total:
        per_org = max(1, min(BACKLOG_CHUNK, total - added) // orgs)
        with env.uow() as uow:
            uow.session.execute(_BACKLOG, {"at": due, "per_org": per_org})
            uow.commit()
        added += per_org * orgs
    with env.engine.connect() as connection:  # as autovacuum would, before the purge reads
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("VACUUM ANALYZE webhook_events, webhook_deliveries")
        )
    return added


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--clients", type=int, default=8, help="orgs, one client each")
    parser.add_argument("--puts", type=int, default=400, help="timed facts PUTs per client")
    parser.add_argument(
        "--document-kb",
        type=int,
        default=32,
        help="facts document (at most 63: the 64 KiB limit counts its keys too)",
    )
    parser.add_argument("--backlog", type=int, default=50_000, help="due events to purge")
    args = parser.parse_args()
    per_org_s = setting("org_requests_per_s", "DRIFTLESS_ORG_REQUESTS_PER_S")
    period_s = setting("reconcile_s", "DRIFTLESS_RECONCILE_S")
    host = machine()
    env = bench_env(args.admin_database_url)
    keys = subscribed_orgs(env, args.clients)
    offered = per_org_s * args.clients  # every org at its limit (0: none, as fast as it goes)

    with web_server(env, "procfile") as (port, server):
        inflow = run_phase(
            "facts PUT", server, port, [put_facts(key, args.document_kb) for key in keys],
            per_client=args.puts, warmup=2, offered_rps=offered or None,
        )  # fmt: skip
    written = count_events(env)
    expected = args.clients * (2 + args.puts)
    if written != expected:
        raise SystemExit(f"{written} events written, {expected} expected: each PUT writes one")
    inflow_eps = inflow.rps  # one event per PUT

    backlog = add_backlog(env, args.clients, args.backlog, dt.datetime.now(dt.UTC))
    passes: list[tuple[int, float]] = []
    while True:
        began = time.perf_counter()
        purged = purge_old_events(new_uow=env.uow, now=dt.datetime.now(dt.UTC))
        passes.append((purged, time.perf_counter() - began))
        if purged < PURGE_BATCH:
            break
    purged_total = sum(n for n, _ in passes)
    if purged_total != backlog or count_events(env) != written:
        raise SystemExit(f"purged {purged_total} of {backlog}; the recent events must stay")
    purge_eps = purged_total / sum(s for _, s in passes)
    budget_s = min(PURGE_PASS_S, period_s / 2)  # as dispatch_overdue gives each pass
    kept_up_eps = purge_eps * budget_s / period_s
    ratio = kept_up_eps / inflow_eps
    full_orgs = kept_up_eps / per_org_s if per_org_s else math.inf

    print(
        f"bench/purge_rate: {args.clients} orgs x {args.puts} facts PUTs of a {args.document_kb}"
        f" KiB document, limit {per_org_s:g} requests/s per org; backlog {backlog} events;"
        f" machine: {host} (clients, web and PostgreSQL share it)"
    )
    print(
        f"  inflow     {inflow_eps:9.0f} events/s   ({len(inflow.latencies_ms)} PUTs in"
        f" {inflow.elapsed_s:.1f} s; the limit would let {offered:g}/s in)"
    )
    print(
        f"  purge      {purge_eps:9.0f} events/s   while a pass runs ({len(passes)} passes,"
        f" the first {passes[0][0]} events in {passes[0][1]:.1f} s)"
    )
    print(f"  kept up    {kept_up_eps:9.0f} events/s   a {budget_s:g} s pass every {period_s:g} s")
    print(f"  kept up ÷ inflow  {ratio:9.1f}")
    print(f"  orgs at the full limit kept up with  {full_orgs:.1f}")
    print(
        f"purge_rate clients={args.clients} document_kb={args.document_kb}"
        f" per_org_s={per_org_s:g} inflow_eps={inflow_eps:.0f} purge_eps={purge_eps:.0f}"
        f" kept_up_eps={kept_up_eps:.0f} ratio={ratio:.1f} full_limit_orgs={full_orgs:.1f}"
    )


if __name__ == "__main__":
    main()
