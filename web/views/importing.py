"""POST /agents-api/import: an export, or chat histories, into the caller's org."""

from __future__ import annotations

import io
from typing import Any

from flask import request

from shared.domain.limits import MAX_IMPORT_BYTES
from shared.portability.importing import import_stream
from web.auth import current_org
from web.body import bound_client_waits
from web.runtime import runtime, unit_of_work
from web.schemas.common import ErrorOut, dump
from web.schemas.importing import NDJSON_BODY, ImportedOut, ImportQuery
from web.views.common import api_blueprint

bp = api_blueprint("importing", "import")


@bp.post("/import", responses={200: ImportedOut, 429: ErrorOut}, openapi_extensions=NDJSON_BODY)
def import_(query: ImportQuery) -> dict[str, Any]:
    """Import the body, read line by line as it arrives; one short transaction per session,
    written once its lines are in; 429 while the org runs its limit of imports at once."""
    request.max_content_length = MAX_IMPORT_BYTES  # past it: 413, as the stream is read
    bound_client_waits()
    rt = runtime()
    imported = import_stream(
        new_uow=unit_of_work, org_id=current_org(), stream=_buffered(request.stream),
        limits=rt.limits, source=query.format,
        agent_id=query.agent_id, user_id=query.user_id, redis_client=rt.redis,
    )  # fmt: skip
    return dump(ImportedOut(imported=imported.as_dict()))


def _buffered(stream: Any) -> Any:
    """The body, read a line at a time from a buffer. Werkzeug's bounded stream is a raw
    one: its readline reads a byte at a time (the web imported 2,700 messages/s so, the
    CLI 30,000; bench/import_speed.py --via web)."""
    return io.BufferedReader(stream, 1 << 16) if isinstance(stream, io.RawIOBase) else stream
