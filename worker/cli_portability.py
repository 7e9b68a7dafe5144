"""`driftless export` and `driftless import`: an org's memory to a file and back, as an
operator moves an org between deployments (docs/operations.md, "Backups and migrations").

Kept apart from worker/cli.py, which adds them to `driftless`.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

import click

from shared.auth.service import ensure_org, org_id_named
from shared.bootstrap import Runtime
from shared.domain.errors import NotFound
from shared.infra.config import load_settings_or_exit
from shared.infra.queue import CeleryJobQueue
from worker.cli_runtime import command_runtime


@click.command()
@click.option("--org", required=True, help="The org's name.")
@click.option("--agent", "agent_id", help="Only this agent id.")
@click.option("--user", "user_id", help="Only this user id.")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8"), required=True)
def export(org: str, agent_id: str | None, user_id: str | None, output: Any) -> None:
    """Write ORG's memory (or an agent's, a user's) to OUTPUT in the export format."""
    from shared.portability.export import ExportScope, count_messages, open_export

    with command_runtime() as rt:
        with rt.unit_of_work() as uow:
            scope = ExportScope(
                org_id=org_id_named(uow=uow, org_name=org), agent_id=agent_id, user_id=user_id
            )
            total = count_messages(uow=uow, scope=scope)
        lines = open_export(new_uow=rt.unit_of_work, redis_client=rt.redis, scope=scope)
        with click.progressbar(length=total, label="exporting messages", file=sys.stderr) as bar:
            for kind, line in lines.records():
                output.write(line)
                if kind == "message":
                    bar.update(1)


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--org", required=True, help="The org's name: the import lands there.")
@click.option(
    "--format",
    "source",
    type=click.Choice(["driftless", "openai-chat"]),
    default="driftless",
    help="An export (default), or chat histories: one JSON array of messages a line.",
)
@click.option("--agent", "agent_id", help="openai-chat: the agent the histories belong to.")
@click.option("--user", "user_id", help="openai-chat: the user the histories belong to.")
@click.option(
    "--create-org", is_flag=True, help="Create ORG if there is none (moving an org here)."
)
def import_(
    file: str,
    org: str,
    source: str,
    agent_id: str | None,
    user_id: str | None,
    create_org: bool,
) -> None:
    """Import FILE into ORG: one transaction a session; again, it changes nothing."""
    from shared.infra.heap import freeze_startup_objects
    from shared.portability.importing import import_stream
    from worker.app import make_celery

    # A chat history's summaries, a promoted topic's cache invalidation: sent for real.
    sender = make_celery(load_settings_or_exit())
    queue = lambda rt: CeleryJobQueue(sender, rt.fair)  # noqa: E731
    with command_runtime(make_queue=queue) as rt, open(file, "rb") as raw:
        org_id = _import_org(rt, org, create=create_org)
        # The command's start-up objects live until it exits; left in the collector's way,
        # they were walked again every few thousand lines: a fifth of the import's time.
        freeze_startup_objects()
        size = os.fstat(raw.fileno()).st_size
        with click.progressbar(length=size, label="importing", file=sys.stderr) as bar:
            imported = import_stream(
                new_uow=rt.unit_of_work, org_id=org_id, stream=_Progress(raw, bar.update),
                limits=rt.limits, source=source, agent_id=agent_id, user_id=user_id,
            )  # fmt: skip
    click.echo(json.dumps(imported.as_dict(), sort_keys=True))


def _import_org(rt: Runtime, org: str, *, create: bool) -> uuid.UUID:
    """ORG's id; with `create`, ORG is made if it is new (and kept should the import fail:
    the same command again goes on into it)."""
    with rt.unit_of_work() as uow:
        if create:
            org_id = ensure_org(uow=uow, org_name=org)
            uow.commit()
            return org_id
        try:
            return org_id_named(uow=uow, org_name=org)
        except NotFound as missing:
            raise click.ClickException(
                f"{missing.message}: pass --create-org to create it, or create a key for it"
                f" first (driftless keys create {org})"
            ) from None


class _Progress:
    """A file whose reads move the progress bar by the bytes read."""

    def __init__(self, raw: Any, advance: Any) -> None:
        self._raw, self._advance = raw, advance

    def readline(self, size: int = -1, /) -> bytes:
        line: bytes = self._raw.readline(size)
        self._advance(len(line))
        return line
