"""The gevent web's responses leave in one send (web/server.py, [4.2]): the header block
waits for the body's first bytes, and anything else done with the socket sends it first."""

from __future__ import annotations

from typing import Any

from web.server import OneSendResponses

HEADERS = b"HTTP/1.1 201 CREATED\r\nContent-Length: 2\r\n\r\n"


class RecordingSocket:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def sendall(self, data: bytes) -> None:
        self.calls.append(("sendall", data))

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> None:
        self.calls.append(("sendfile", count))


def test_headers_and_body_go_in_one_send_42() -> None:
    sock = RecordingSocket()
    responses = OneSendResponses(sock)
    responses.sendall(HEADERS)
    responses.sendall(b"{}")
    responses.flush()
    assert sock.calls == [("sendall", HEADERS + b"{}")]


def test_a_response_without_a_body_sends_its_headers_at_the_end_42() -> None:
    sock = RecordingSocket()
    responses = OneSendResponses(sock)
    responses.sendall(HEADERS)
    assert sock.calls == []
    responses.flush()
    assert sock.calls == [("sendall", HEADERS)]


def test_a_sendfile_body_follows_its_headers_42() -> None:
    sock = RecordingSocket()
    responses = OneSendResponses(sock)
    responses.sendall(HEADERS)
    responses.sendfile(None, offset=0, count=2)
    assert sock.calls == [("sendall", HEADERS), ("sendfile", 2)]


def test_the_chunks_of_a_stream_go_out_as_they_come_42() -> None:
    sock = RecordingSocket()
    responses = OneSendResponses(sock)
    responses.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    responses.sendall(b"6\r\nready\n\r\n")
    responses.sendall(b"5\r\nping\n\r\n")
    assert [data for _, data in sock.calls][1:] == [b"5\r\nping\n\r\n"]
    assert len(sock.calls) == 2
