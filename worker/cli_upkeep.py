"""The fleet's upkeep commands of `driftless`: vectors to backfill, secrets to re-seal.

Kept apart from worker/cli.py (which adds them to `driftless`), each a group of its own.
"""

from __future__ import annotations

import sys
import time

import click

from shared.bootstrap import Runtime
from shared.infra.config import load_settings_or_exit
from shared.infra.queue import CeleryJobQueue
from worker.cli_runtime import command_runtime, database_url


@click.group()
def embeddings() -> None:
    """Vectors for recall by meaning (DRIFTLESS_EMBEDDINGS)."""


# How often `embeddings backfill` counts what is still missing.
BACKFILL_FOLLOW_S = 2.0


@embeddings.command("backfill")
@click.option("--no-wait", is_flag=True, help="Send the batches and exit, without following.")
def embeddings_backfill(no_wait: bool) -> None:
    """Embed every message and topic missing a vector of the configured model (after a
    model change, all of them: the old model's vectors are replaced). The batches go to
    the workers' `embeddings_bulk` queue; run it again to resume, it sends only what is
    still missing. Ctrl-C stops following and leaves the batches queued."""
    from shared.embeddings.backfill import missing, send_batches
    from shared.embeddings.schema import ensure_vector_schema_at
    from worker.app import make_celery

    settings = load_settings_or_exit()
    if settings.embeddings == "none":
        raise click.ClickException("embeddings are off: set DRIFTLESS_EMBEDDINGS first")
    if not ensure_vector_schema_at(database_url()):
        raise click.ClickException(
            "the PostgreSQL server has no 'vector' extension (pgvector): install it first"
        )
    model = settings.embeddings_model
    sender = make_celery(settings)
    with command_runtime(make_queue=lambda rt: CeleryJobQueue(sender)) as rt:
        with rt.unit_of_work() as uow:
            total = missing(uow=uow, model=model)
        sent = send_batches(new_uow=rt.unit_of_work, model=model)
        click.echo(
            f"embeddings backfill by {model}: {total} missing, {sent} batches sent", err=True
        )
        if no_wait or total == 0:
            return
        try:
            _follow_backfill(rt, model, total)
        except KeyboardInterrupt:
            click.echo("\nstopped following: the workers embed the batches sent", err=True)
            sys.exit(130)
    click.echo(f"embeddings backfill by {model}: done")


def _follow_backfill(rt: Runtime, model: str, total: int) -> None:
    from shared.embeddings.backfill import missing

    done = 0
    with click.progressbar(length=total, label="embedding", file=sys.stderr) as bar:
        while done < total:
            time.sleep(BACKFILL_FOLLOW_S)
            with rt.unit_of_work() as uow:
                now_done = max(0, total - missing(uow=uow, model=model))
            bar.update(now_done - done)
            done = max(done, now_done)


@click.group()
def secrets() -> None:
    """Stored secrets (webhook secrets, orgs' model keys), sealed under DRIFTLESS_SECRET_KEYS."""


@secrets.command("reseal")
def secrets_reseal() -> None:
    """Seal every stored secret again under the first key of DRIFTLESS_SECRET_KEYS (after
    a new key was put first), and seal those stored as given. In batches, each committed:
    safe to interrupt and to run again (what is already under the first key is left)."""
    from shared.reseal import reseal

    with command_runtime() as rt:
        done = reseal(new_uow=rt.unit_of_work, box=rt.secret_box)
    for column in done:
        click.echo(
            f"{column.column}: {column.rows} read, {column.resealed} resealed"
            f" ({column.plain} had been stored as given), {column.current} already under"
            f" the first key, {column.unopenable} opened by no listed key"
        )
    if any(column.unopenable for column in done):
        raise click.ClickException(
            "some secrets were sealed with a key DRIFTLESS_SECRET_KEYS no longer lists: put it"
            " back (after the first) and run this again"
        )
