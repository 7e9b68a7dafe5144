"""GET /agents-api/export: everything a scope holds, streamed as NDJSON."""

from __future__ import annotations

from flask import Response

from shared.portability.export import ExportScope, open_export
from web.auth import current_org
from web.body import bound_client_waits
from web.runtime import runtime
from web.schemas.common import ErrorOut
from web.schemas.export import NDJSON, NDJSON_ANSWER, ExportQuery
from web.views.common import api_blueprint

bp = api_blueprint("export", "export")


@bp.get("/export", responses={200: NDJSON_ANSWER, 429: ErrorOut})
def export(query: ExportQuery) -> Response:
    """The scope's agent profiles, sessions (topics, forks, messages, notes, curation) and
    facts with their history, one line each, as they are read; 429 while the org runs
    its limit of exports at once, with Retry-After. A client that stops reading for
    DRIFTLESS_CLIENT_STALL_S is cut off, and the export's snapshot and slot given back."""
    bound_client_waits()
    scope = ExportScope(org_id=current_org(), agent_id=query.agent_id, user_id=query.user_id)
    rt = runtime()  # its unit of work, not the view's helper: the body is read after the request
    lines = open_export(new_uow=rt.unit_of_work, redis_client=rt.redis, scope=scope)
    name = "driftless-export.ndjson"
    headers = {"Content-Disposition": f'attachment; filename="{name}"', "X-Accel-Buffering": "no"}
    return Response(lines, mimetype=NDJSON, headers=headers)
