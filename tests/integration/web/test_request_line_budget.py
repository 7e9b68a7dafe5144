"""The web's `--limit-request-line` fits the longest request line a valid request can
need: every bounded path and query parameter (ids, fact keys) at its longest, in
4-byte characters. A longer id limit, or a new route carrying one more id, fails here
before gunicorn answers it with a 414 (tests/e2e/test_request_line.py serves one)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

ROOT = Path(__file__).resolve().parents[3]
# The worst character: 4 UTF-8 bytes, each sent as %XX.
BYTES_PER_CHAR = 12
GUNICORN_MAX_REQUEST_LINE = 8190  # gunicorn reads any higher limit as this one


def _procfile_limit() -> int:
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.startswith("web:"):
            argv = shlex.split(line.removeprefix("web:"))
            return int(argv[argv.index("--limit-request-line") + 1])
    raise AssertionError("no web process in the Procfile")


def _max_length(schema: dict[str, Any]) -> int | None:
    lengths = [s["maxLength"] for s in [schema, *schema.get("anyOf", [])] if "maxLength" in s]
    return max(lengths) if lengths else None


def _longest_line(method: str, path: str, parameters: list[dict[str, Any]]) -> int:
    query = []
    for parameter in parameters:
        length = _max_length(parameter["schema"])
        if length is None:  # a number, a flag, a word, or a search text: not an id
            continue
        value = "x" * (BYTES_PER_CHAR * length)
        if parameter["in"] == "path":
            path = path.replace("{" + parameter["name"] + "}", value)
        elif parameter["in"] == "query":
            query.append(f"{parameter['name']}={value}")
    target = path + ("?" + "&".join(query) if query else "")
    return len(f"{method.upper()} {target} HTTP/1.1")


def test_the_longest_valid_request_line_fits_the_web_servers_limit(client: FlaskClient) -> None:
    document: Any = client.get("/agents-api/openapi.json").json
    lines = {
        f"{method.upper()} {path}": _longest_line(method, path, operation.get("parameters", []))
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }
    worst = max(lines, key=lines.__getitem__)

    assert (worst, lines[worst]) == ("GET /agents-api/facts/history", 7260)  # the Procfile's sum
    assert lines[worst] <= _procfile_limit() <= GUNICORN_MAX_REQUEST_LINE
