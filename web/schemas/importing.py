"""Import of an export or of chat histories: the query that says which, and the counts."""

from __future__ import annotations

from typing import Any, Literal

from web.schemas.common import CamelModel, Input, ScopeId

# The body is not a model: it is streamed, one line at a time (shared/portability/).
NDJSON_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "An export (driftless.export v1) or chat histories, one JSON a line",
        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
    }
}


class ImportQuery(CamelModel, Input):
    format: Literal["driftless", "openai-chat"] = "driftless"
    agent_id: ScopeId | None = None
    user_id: ScopeId | None = None


class ImportedOut(CamelModel):
    imported: dict[str, int]
