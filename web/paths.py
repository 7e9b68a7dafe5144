"""Path parameters that hold `/`: `PUT /agents-api/agents/a%2Fb` names the agent `a/b`.

The WSGI server decodes the path before Flask routes it, so `a%2Fb` arrives as `a/b`
and routes as two segments: an agent or user id, or a facts key, holding `/` missed its
route (404). The request target as sent (`RAW_URI`, set by gunicorn and Werkzeug alike)
still tells an encoded `/` from a separator: `KeepEncodedSlashes` rebuilds the routed
path from it, each segment decoded but with `/` and `%` escaped again, and
`SegmentConverter` (the default `<name>` converter) decodes them for the view.

A segment whose bytes are not UTF-8 names nothing: decoded with replacement, `%FF` and
`%FE` were both the agent U+FFFD, the second written over the first. Such a segment is
routed with every byte escaped, and the converter answers it with a 400 naming the path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, quote_from_bytes, unquote, unquote_to_bytes

from flask import has_request_context, request
from werkzeug.exceptions import BadRequest
from werkzeug.routing import BaseConverter


def _escaped(segment: str) -> str:
    """A decoded segment with `%` and `/` encoded again: the only escapes a routed path
    segment holds, so decoding it gives the segment back exactly."""
    return segment.replace("%", "%25").replace("/", "%2F")


def _routed_segment(data: bytes) -> str:
    """A segment's bytes, escapes decoded, as a routed segment (a WSGI string): UTF-8 text
    with `%` and `/` escaped again, anything else with every byte escaped, which only
    `SegmentConverter` fails to decode."""
    try:
        data.decode()
    except UnicodeDecodeError:
        return quote_from_bytes(data, safe="")
    return _escaped(data.decode("latin-1"))


def routed_path(raw_path: str) -> str:
    """The path to route from the path as sent, both WSGI strings (bytes as latin-1: a
    client may send a byte above ASCII unencoded)."""
    return "/".join(
        _routed_segment(unquote_to_bytes(segment.encode("latin-1")))
        for segment in raw_path.split("/")
    )


class KeepEncodedSlashes:
    """WSGI middleware: PATH_INFO rebuilt from the request target as sent."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
        raw_path = raw.split("?", 1)[0]
        script = environ.get("SCRIPT_NAME", "")
        environ["PATH_INFO"] = _routed(raw_path, script, environ.get("PATH_INFO", ""))
        return self.app(environ, start_response)


def _routed(raw_path: str, script: str, path_info: str) -> str:
    if raw_path.startswith(script + "/"):
        try:
            return routed_path(raw_path[len(script) :])
        except UnicodeEncodeError:  # not a WSGI string: a server outside the spec
            pass
    # An absolute-form target or none: the decoded path is all there is.
    segments = path_info.split("/")
    try:
        return "/".join(_routed_segment(segment.encode("latin-1")) for segment in segments)
    except UnicodeEncodeError:  # not a WSGI string, as above
        return "/".join(_escaped(segment) for segment in segments)


class SegmentConverter(BaseConverter):
    """The default converter: one path segment, its `%2F` and `%25` decoded; a 400 when
    it is not UTF-8 (escaped whole by `_routed_segment`)."""

    def to_python(self, value: str) -> str:
        try:
            return unquote(value, errors="strict")
        except UnicodeDecodeError:
            # The routed path shows such a segment escaped, the others as text.
            path = request.path if has_request_context() else value
            raise BadRequest(
                f"the path {path} is not UTF-8 once its %-escapes are decoded"
            ) from None

    def to_url(self, value: str) -> str:
        return quote(value, safe="")
