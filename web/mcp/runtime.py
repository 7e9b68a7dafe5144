"""The MCP server's runtime: the same PostgreSQL, Redis and broker as the web app, built
in shared/bootstrap.py, with jobs sent like the web sends them (web/jobs.py)."""

from __future__ import annotations

from shared.bootstrap import Runtime
from shared.infra.config import Settings
from web.jobs import make_job_queue


def runtime_from_settings(settings: Settings) -> Runtime:
    return Runtime(settings, make_queue=make_job_queue).build()
