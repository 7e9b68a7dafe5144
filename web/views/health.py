"""Liveness and readiness: outside /agents-api, no key needed (probes carry none)."""

from __future__ import annotations

from typing import Any

from flask_openapi3 import APIBlueprint, Tag
from sqlalchemy import text

from shared.embeddings.store import embeddings_status
from web.runtime import runtime
from web.schemas.common import dump
from web.schemas.health import HealthOut

bp = APIBlueprint("health", __name__, abp_tags=[Tag(name="health")])


@bp.get("/healthz", responses={200: HealthOut})
def healthz() -> dict[str, Any]:
    """The process is up (no dependency is touched, so a slow database never kills it)."""
    return dump(HealthOut(status="ok"))


@bp.get("/readyz", responses={200: HealthOut, 503: HealthOut})
def readyz() -> tuple[dict[str, Any], int]:
    """Ready to serve: PostgreSQL and Redis both answer; `embeddings` says whether recall by
    meaning is on (`ok`) or off and why, and never makes the answer a 503."""
    rt = runtime()
    checks: dict[str, str] = {}
    try:
        with rt.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unavailable: {type(exc).__name__}"
    try:
        rt.redis.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"unavailable: {type(exc).__name__}"
    ready = all(value == "ok" for value in checks.values())
    if checks["database"] == "ok":  # a detail, never a 503: without pgvector, search is lexical
        checks["embeddings"] = embeddings_status(new_uow=rt.unit_of_work, settings=rt.settings)
    return dump(HealthOut(status="ok" if ready else "unavailable", checks=checks)), (
        200 if ready else 503
    )
