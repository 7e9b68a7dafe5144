"""Export of a scope (shared/portability/export.py): its query, and the body's type."""

from __future__ import annotations

from typing import Any

from web.schemas.common import CamelModel, Input, ScopeId

NDJSON = "application/x-ndjson"

# The body is not a model: it streams, one line of the export format a line
# (docs/export-format.md).
NDJSON_ANSWER: dict[str, Any] = {
    "description": "The export, driftless.export v1: the header line first, one JSON a line",
    "content": {NDJSON: {"schema": {"type": "string"}}},
}


class ExportQuery(CamelModel, Input):
    """Narrow the export to an agent and/or a user of the org; neither: the whole org."""

    agent_id: ScopeId | None = None
    user_id: ScopeId | None = None
