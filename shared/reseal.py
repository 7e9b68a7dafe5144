"""`driftless secrets reseal`: every stored secret sealed again under the newest key.

The columns are those the models mark `info={SEALED: True}` (shared/infra/sealing.py);
shared/models.py imports every model, so none is missed. Each table is walked
by primary key in batches, each batch its own short transaction, so a long table holds
no lock for long and an interrupted run loses at most one batch. A row is written only
if it still holds what was read (compare and set): a secret replaced meanwhile keeps its
new value. A row already under the newest key is left as it is, so a second run changes
nothing, and a run after an interruption changes only what the first did not reach.
Rows stored as given (`plain:`) before secrets had to be sealed are sealed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Column, select, update

from shared.infra.db.uow import UnitOfWork
from shared.infra.sealing import PLAIN, SEALED, SecretBox, SecretUnavailable

log = logging.getLogger(__name__)

BATCH = 500


@dataclass
class Resealed:
    """What a run did to one column's rows."""

    column: str  # table.column
    rows: int = 0
    resealed: int = 0  # written under the newest key (`plain`: of them, stored as given)
    plain: int = 0
    current: int = 0  # already under the newest key: left as they were
    unopenable: int = 0  # sealed with a key no longer listed: left, and logged


def sealed_columns() -> list[Column[str]]:
    """Every column of every model marked as holding sealed secrets, in table order."""
    from shared.models import Base

    return [
        column
        for table in Base.metadata.sorted_tables
        for column in table.columns
        if column.info.get(SEALED)
    ]


def reseal(
    *, new_uow: Callable[[], UnitOfWork], box: SecretBox, batch: int = BATCH
) -> list[Resealed]:
    """Seal every stored secret under `box`'s newest key; what was done, per column.
    Raises SealingKeyMissing when `box` has no key."""
    box.require_keys()
    return [_reseal_column(new_uow, box, column, batch) for column in sealed_columns()]


def _reseal_column(
    new_uow: Callable[[], UnitOfWork], box: SecretBox, column: Column[str], batch: int
) -> Resealed:
    table = column.table
    (key,) = table.primary_key.columns  # every sealed table has a one-column key
    done = Resealed(f"{table.name}.{column.name}")
    after = None
    while True:
        with new_uow() as uow:
            query = select(key, column).order_by(key).limit(batch)
            if after is not None:
                query = query.where(key > after)
            rows = uow.session.execute(query).all()
            if not rows:
                return done
            for row_key, sealed in rows:
                done.rows += 1
                try:
                    fresh = box.resealed(sealed)
                except SecretUnavailable:
                    log.error("%s %s: no listed key opens it; left as it is", done.column, row_key)
                    done.unopenable += 1
                    continue
                if fresh is None:
                    done.current += 1
                    continue
                written = uow.session.execute(
                    update(table).where(key == row_key, column == sealed).values({column: fresh})
                )
                if written.rowcount:  # type: ignore[attr-defined]
                    done.resealed += 1
                    done.plain += sealed.startswith(PLAIN)
            uow.commit()
            after = rows[-1][0]
