"""The process's runtime (shared/bootstrap.py), as a request sees it."""

from __future__ import annotations

from flask import current_app

from shared.bootstrap import Runtime
from shared.infra.db.uow import UnitOfWork


def runtime() -> Runtime:
    rt: Runtime = current_app.extensions["driftless"]
    return rt


def unit_of_work() -> UnitOfWork:
    return runtime().unit_of_work()
