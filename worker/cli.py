"""The `driftless` command line (docs/contract.md, "Command line")."""

from __future__ import annotations

import datetime as dt
import json
import signal
import sys
import threading
import uuid
from importlib.metadata import entry_points
from typing import Any

import click

from shared import models
from shared.auth.service import create_api_key, list_keys, org_id_named, revoke_key
from shared.bootstrap import Runtime
from shared.infra.config import load_settings_or_exit
from shared.infra.db import migrate
from shared.infra.logs import configure_logging
from shared.orgs.service import DEFAULT, OrgLimits, set_limits
from worker.cli_portability import export, import_
from worker.cli_runtime import command_runtime, database_url
from worker.cli_upkeep import embeddings, secrets


class DriftlessCLI(click.Group):
    """The commands here, and those other parts of driftless contribute through the
    `driftless.commands` entry points (the MCP server's lives with it, in web/mcp):
    the worker does not import the web."""

    def _contributed(self) -> dict[str, click.Command]:
        return {ep.name: ep.load() for ep in entry_points(group="driftless.commands")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._contributed()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return super().get_command(ctx, name) or self._contributed().get(name)


@click.group(cls=DriftlessCLI)
def main() -> None:
    """driftless: bounded, curated memory for long-horizon agents."""
    configure_logging(load_settings_or_exit().log_format)


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Migrate the database to the newest schema."""
    from shared.embeddings.schema import ensure_vector_schema_at

    url = database_url()
    migrate.upgrade(url)
    # Again at every upgrade: a server that gained pgvector since 0018 ran gets its tables.
    vectors = ensure_vector_schema_at(url)
    click.echo("database is at head" + ("" if vectors else " (no pgvector: embeddings off)"))


@db.command("check")
def db_check() -> None:
    """Fail if the models have changes no migration covers."""
    models.check(database_url())
    click.echo("models and migrations agree")


@main.group()
def keys() -> None:
    """API keys."""


@keys.command("create")
@click.argument("org")
def keys_create(org: str) -> None:
    """Create an API key for ORG (created if new); the key is the last line printed."""
    with command_runtime() as rt, rt.unit_of_work() as uow:
        key = create_api_key(uow=uow, org_name=org)
        uow.commit()
    click.echo(f"created an API key for org {org!r}; it is shown only once:", err=True)
    click.echo(key)


def _when(at: dt.datetime | None) -> str:
    return "-" if at is None else at.astimezone(dt.UTC).isoformat(timespec="seconds")


@keys.command("list")
@click.argument("org")
def keys_list(org: str) -> None:
    """List ORG's keys: prefix, created, revoked (the keys themselves are never stored)."""
    with command_runtime() as rt, rt.unit_of_work() as uow:
        listed = list_keys(uow=uow, org_name=org)
    click.echo(f"{'PREFIX':<16} {'CREATED':<25} REVOKED")
    for info in listed:
        click.echo(f"{info.prefix:<16} {_when(info.created_at):<25} {_when(info.revoked_at)}")


@keys.command("revoke")
@click.argument("prefix")
def keys_revoke(prefix: str) -> None:
    """Revoke the key whose prefix is PREFIX: it is refused from the next request on."""
    with command_runtime() as rt, rt.unit_of_work() as uow:
        info = revoke_key(uow=uow, prefix=prefix)
        uow.commit()
    click.echo(
        f"key {info.prefix} of org {info.org_name!r} is revoked since {_when(info.revoked_at)}"
    )


@main.group()
def orgs() -> None:
    """Orgs' own limits."""


class _LimitOrDefault(click.ParamType):
    """A number, or 'default' for the fleet's (the DRIFTLESS_ORG_* setting)."""

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = f"{kind.__name__}|default"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) or value == DEFAULT:
            return value
        try:
            return self.kind(value)
        except ValueError:
            what = "a whole number" if self.kind is int else "a number"
            self.fail(f"{value!r} is not {what} or {DEFAULT!r}", param, ctx)


def _limit(value: float | int | None, setting: str) -> str:
    if value is None:
        return f"the default ({setting})"
    return f"{value:g}" if isinstance(value, float) else str(value)  # 5000000, not 5e+06


def _show_limits(limits: OrgLimits) -> str:
    per_s = _limit(limits.requests_per_s, "DRIFTLESS_ORG_REQUESTS_PER_S")
    burst = _limit(limits.request_burst, "DRIFTLESS_ORG_REQUEST_BURST")
    rpm = _limit(limits.llm_rpm, "DRIFTLESS_ORG_LLM_RPM")
    tokens = _limit(limits.monthly_tokens, "DRIFTLESS_ORG_MONTHLY_TOKENS")
    return (
        f"org {limits.name!r}: requests a second {per_s}, request burst {burst},"
        f" LLM calls a minute {rpm}, monthly tokens {tokens}"
    )


@orgs.command("set")
@click.argument("org")
@click.option(
    "--requests-per-s",
    type=_LimitOrDefault(float),
    help="Requests a second the org may make, 0.001 to 1000000 (0: no limit; 'default': the"
    " fleet's).",
)
@click.option(
    "--request-burst",
    type=_LimitOrDefault(int),
    help="Requests the org may make at once after a pause, 1 to 1000000 ('default': the fleet's).",
)
@click.option(
    "--llm-rpm",
    type=_LimitOrDefault(int),
    help="Model calls a minute the org's work may make, 1 to 1000000; more wait (0: no limit;"
    " 'default').",
)
@click.option(
    "--monthly-tokens",
    type=_LimitOrDefault(int),
    help="Model tokens a calendar month (UTC), 1 to 10^15; past them fallback summaries, no"
    " drift (0: no limit; 'default').",
)
def orgs_set(
    org: str, requests_per_s: float | str | None, request_burst: int | str | None,
    llm_rpm: int | str | None, monthly_tokens: int | str | None,
) -> None:  # fmt: skip
    """Give ORG its own limits: its request rate, applied by every web process within
    DRIFTLESS_AUTH_CACHE_S (its keys' cache), and its LLM budget, by every worker within
    10 seconds."""
    with command_runtime() as rt, rt.unit_of_work() as uow:
        limits = set_limits(
            uow=uow, org_name=org, requests_per_s=requests_per_s, request_burst=request_burst,
            llm_rpm=llm_rpm, monthly_tokens=monthly_tokens,
        )  # fmt: skip
        uow.commit()
    click.echo(_show_limits(limits))


@main.command()
def up() -> None:
    """Run web, worker and beat together until Ctrl-C."""
    from worker.supervisor import run_system

    sys.exit(run_system(load_settings_or_exit()))


@main.command()
@click.option("--url", help="A running system (default: start one for the demo).")
@click.option("--key", help="An API key for --url.")
def demo(url: str | None, key: str | None) -> None:
    """A scripted two-session conversation: summaries, promotions, the memory block."""
    from worker.demo import Api, run_demo, started_system

    if url:
        if not key:
            raise click.UsageError("--url needs --key")
        run_demo(Api(url, key))
        return
    with started_system() as (started_url, dev_key):
        run_demo(Api(started_url, dev_key))


class IsoMoment(click.ParamType):
    """An ISO-8601 time; one without an offset is UTC."""

    name = "ISO-8601"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dt.datetime):
            return value
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO-8601 time, such as 2026-01-01T00:00:00Z", param, ctx
            )
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


# How often `reevaluate` reads its campaign's progress.
FOLLOW_S = 0.5


@main.command()
@click.option("--org", help="Only this org (its name); default: every org.")
@click.option("--agent", "agent_id", help="Only this agent id.")
@click.option("--user", "user_id", help="Only this user id.")
@click.option(
    "--since", type=IsoMoment(), help="Only topics created at or after (ISO; UTC if no offset)."
)
@click.option("--rate", type=float, help="Topics enqueued a second (default 5; 0.1 to 1000).")
def reevaluate(
    org: str | None, agent_id: str | None, user_id: str | None, since: Any, rate: float | None
) -> None:
    """Start a re-evaluation campaign of matching topics (after a prompt or model change)
    and follow it. The worker's beat enqueues them at the rate; Ctrl-C stops following
    and leaves the campaign running."""
    from shared.reevaluations.service import start_campaign

    with command_runtime() as rt:
        with rt.unit_of_work() as uow:
            org_id = org_id_named(uow=uow, org_name=org) if org is not None else None
            campaign = start_campaign(
                uow=uow, org_id=org_id, origin="cli",
                campaigns_per_org=rt.settings.campaigns_per_org, agent_id=agent_id,
                user_id=user_id, since=since, rate=rate,
            )  # fmt: skip
            uow.commit()
        # From the commit on, Ctrl-C means "stop following", whenever it comes. It only
        # sets a flag that the loop reads between polls: a KeyboardInterrupt raised in
        # the middle of a pool checkout or a query could leave the pool's lock held, and
        # the runtime's close would then wait for ever.
        stop = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
        try:
            click.echo(
                f"re-evaluation {campaign.id}: {campaign.total}"
                f" topic{'' if campaign.total == 1 else 's'} at {campaign.rate:g} a second",
                err=True,
            )
            ended = _follow(rt, campaign.id, campaign.total, stop)
        finally:
            signal.signal(signal.SIGINT, previous)
        if ended is None:
            click.echo(
                f"\nstopped following: re-evaluation {campaign.id} keeps running"
                " (beat enqueues the rest at its rate)",
                err=True,
            )
            sys.exit(130)
    click.echo(
        f"re-evaluation {ended.id} {ended.state}: {ended.done} done, {ended.failed} failed"
        f" of {ended.total}"
    )


def _follow(rt: Runtime, campaign_id: uuid.UUID, total: int, stop: threading.Event) -> Any:
    """The campaign once it is no longer running, its progress shown meanwhile; None
    once `stop` is set."""
    from shared.reevaluations.service import read_campaign

    shown = 0
    with click.progressbar(length=total, label="re-evaluating", file=sys.stderr) as bar:
        while True:
            with rt.unit_of_work() as uow:
                campaign = read_campaign(uow=uow, campaign_id=campaign_id)
            bar.length = campaign.total  # exact once every topic was enqueued
            settled = campaign.done + campaign.failed
            bar.update(settled - shown)
            shown = settled
            if campaign.state != "running":
                return campaign
            if stop.wait(FOLLOW_S):
                return None


@main.command()
@click.option("--org", required=True, help="The org's name.")
@click.option("--agent", "agent_id", required=True)
@click.option("--user", "user_id", required=True)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def erase(org: str, agent_id: str, user_id: str, yes: bool) -> None:
    """Erase everything held about USER of AGENT in ORG, and print what went."""
    from shared.erasure.service import erase_user_everywhere
    from shared.memory.scope import Scope

    if not yes:
        click.confirm(f"Erase user {user_id!r} of agent {agent_id!r} in org {org!r}?", abort=True)
    with command_runtime() as rt:
        with rt.unit_of_work() as uow:
            org_id = org_id_named(uow=uow, org_name=org)
        erased = erase_user_everywhere(
            new_uow=rt.unit_of_work,
            redis_client=rt.redis,
            scope=Scope(org_id=org_id, agent_id=agent_id, user_id=user_id),
        )
    click.echo(json.dumps(erased.counts, sort_keys=True))


main.add_command(embeddings)
main.add_command(export)
main.add_command(import_)
main.add_command(secrets)
