"""Path parameters that hold `/`: `PUT /agents-api/agents/a%2Fb` names the agent `a/b`.

The WSGI server decodes the path before Flask routes it, so `a%2Fb` arrives as `a/b`
and routes as two segments: an agent or user id, or a facts key, holding `/` missed its
route (404). The request target as sent (`RAW_URI`, set by gunicorn and Werkzeug alike)
still tells an encoded `/` from a separator: `KeepEncodedSlashes` rebuilds the routed
path from it, each segment decoded but with `/` and `%` escaped again, and
`SegmentConverter` (the default `<name>` converter) decodes them for the view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote, unquote_to_bytes

from werkzeug.routing import BaseConverter


def _escaped(segment: str) -> str:
    """A decoded segment with `%` and `/` encoded again: the only escapes a routed path
    segment holds, so decoding it gives the segment back exactly."""
    return segment.replace("%", "%25").replace("/", "%2F")


def routed_path(raw_path: str) -> str:
    """The path to route from the path as sent, both WSGI strings (bytes as latin-1: a
    client may send a byte above ASCII unencoded)."""
    return "/".join(
        _escaped(unquote_to_bytes(segment.encode("latin-1")).decode("latin-1"))
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
    return "/".join(_escaped(segment) for segment in path_info.split("/"))


class SegmentConverter(BaseConverter):
    """The default converter: one path segment, its `%2F` and `%25` decoded."""

    def to_python(self, value: str) -> str:
        return unquote(value)

    def to_url(self, value: str) -> str:
        return quote(value, safe="")
