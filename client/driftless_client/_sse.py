"""Server-Sent Events, line by line (the server's `GET …/events`)."""

from __future__ import annotations

import json
from typing import Any


class EventParser:
    """Feed it the stream's lines (without their line ends); an event comes out at the
    blank line that ends it, as `{"event": name, "data": …}` with the data parsed as JSON
    (left a string when it is not JSON). Comments (the server's `: ping`) are skipped."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> dict[str, Any] | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        return None  # `id` and `retry` mean nothing to this client

    def _dispatch(self) -> dict[str, Any] | None:
        event, data = self._event or "message", self._data
        self._event, self._data = "", []
        if not data:  # as the SSE standard says: no data, no event
            return None
        text = "\n".join(data)
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = text
        return {"event": event, "data": parsed}
