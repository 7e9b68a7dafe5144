"""bench/embeddings_server.py computes only what someone still waits for: a request whose
client hung up while it waited for its turn is dropped, so a queue of timed-out requests
cannot push every later one past its own timeout (the recall bench's stall, [4.3])."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest

from bench.embeddings_server import client_hung_up, make_handler

BLOCKED_S = 30.0  # how long the held request may wait for the test: never, if it works


class HeldModel:
    """A stand-in model whose first embed waits until the test lets it go."""

    name = "held"
    dimensions = 2

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.embedded: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.embedded.append(texts)
        if len(self.embedded) == 1:
            self.started.set()
            assert self.release.wait(BLOCKED_S)
        return [[1.0, 0.0] for _ in texts]

    def tokens(self, texts: list[str]) -> int:
        return len(texts)


class Said(logging.Handler):
    """Sets `seen` once the server logs a line holding `needle`."""

    def __init__(self, needle: str) -> None:
        super().__init__()
        self.needle, self.seen = needle, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.seen.set()


@pytest.fixture
def dropped() -> Iterator[threading.Event]:
    """Set when the server drops a request."""
    said, logger = Said("dropped"), logging.getLogger("bench.embeddings_server")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(said)
    yield said.seen
    logger.removeHandler(said)
    logger.setLevel(level)


@pytest.fixture
def served() -> Iterator[tuple[HeldModel, int]]:
    model = HeldModel()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(model))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield model, server.server_port
    model.release.set()
    server.shutdown()
    server.server_close()


def _post(port: int, texts: list[str]) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"input": texts}, timeout=60)


def test_a_request_whose_client_hung_up_while_it_waited_is_dropped_not_computed_43(
    served: tuple[HeldModel, int], dropped: threading.Event
) -> None:
    model, port = served
    first: list[httpx.Response] = []
    holder = threading.Thread(target=lambda: first.append(_post(port, ["first"])))
    holder.start()
    assert model.started.wait(BLOCKED_S)  # "first" holds the turn

    # A client that sends its request and gives up while it waits (as one past its timeout).
    body = json.dumps({"input": ["abandoned"]}).encode()
    with socket.create_connection(("127.0.0.1", port)) as gone:
        gone.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    model.release.set()
    holder.join()
    assert dropped.wait(BLOCKED_S)

    later = _post(port, ["later"])
    assert first[0].status_code == later.status_code == 200
    assert model.embedded == [["first"], ["later"]]  # never "abandoned"
    assert later.json()["data"][0]["embedding"] == [1.0, 0.0]


def test_a_connection_is_hung_up_once_its_client_closed_it_and_not_while_it_is_open_43() -> None:
    server_end, client_end = socket.socketpair()
    with server_end:
        assert not client_hung_up(server_end)  # open, nothing sent
        client_end.sendall(b"GET / HTTP/1.1\r\n")
        assert not client_hung_up(server_end)  # a next request is not a hang-up
        server_end.recv(100)
        client_end.close()
        assert client_hung_up(server_end)
