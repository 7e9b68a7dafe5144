"""A live event stream read through http.client, strict about how the response ends."""

from __future__ import annotations

import http.client

TIMEOUT_S = 10.0


class EventStream:
    """One `GET …/events`, read through http.client, which checks the chunked framing."""

    def __init__(self, port: int, key: str, sid: str, timeout_s: float = TIMEOUT_S) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        self.connection.request("GET", f"/agents-api/sessions/{sid}/events", headers=headers)
        self.response = self.connection.getresponse()
        assert self.response.status == 200, self.response.read()
        self._buffer = b""

    def next(self) -> tuple[str, str] | None:
        """(event, data) of the next event, pings skipped; None at the response's end.

        Raises http.client.IncompleteRead if the connection ends before the last chunk
        (`read1`: `readline` would take that for a clean end)."""
        while True:
            block, separator, rest = self._buffer.partition(b"\n\n")
            if not separator:
                chunk = self.response.read1(4096)
                if not chunk:
                    return None
                self._buffer += chunk
                continue
            self._buffer = rest
            lines = block.decode().split("\n")
            fields = dict(line.split(": ", 1) for line in lines if not line.startswith(":"))
            if "event" in fields:
                return fields["event"], fields.get("data", "")

    def close(self) -> None:
        self.response.close()
        self.connection.close()


def rest(stream: EventStream) -> list[tuple[str, str] | str]:
    """The events up to the response's end, or how the connection failed instead."""
    events: list[tuple[str, str] | str] = []
    try:
        while (event := stream.next()) is not None:
            events.append(event)
    except (OSError, http.client.HTTPException) as exc:  # timed out, reset, cut short
        events.append(type(exc).__name__)
    return events
