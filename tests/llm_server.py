"""A small OpenAI-compatible HTTP server for tests, standard library only.

It speaks just enough of the API for the real `openai` client: POST /v1/chat/completions
and GET /v1/models. Answers are scripted (`answer`, `answer_json`, `fail`, `slow`,
`queue`, or computed from each request by `answer_with`), and every request body is
logged, so a test can check what the provider sent; `in_flight` counts the calls being
answered right now (a fault test kills a worker while one is).

POST /v1/embeddings answers tests/embedding_standin.py's vector of each input (64 long,
or the request's `dimensions`), so texts that share words are close. Its requests are
logged apart (`embedding_requests`) and scripted apart (`embeddings_fail`,
`embeddings_slow`, `embeddings_answer_with`): chat completions never see them.

`python -m tests.llm_server --port 8099` serves it on its own, for the README's agent
loop without an OpenAI key: each answer says what reached the model.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tests.embedding_standin import DIMENSIONS, embedding


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a completion with `content`, or an HTTP error `status`."""

    content: str | None = "{}"
    status: int = 200
    delay_s: float = 0.0
    usage: tuple[int, int] | None = None  # (prompt, completion); None: estimated
    model: str | None = None  # None: echo the requested model
    retry_after_ms: int | None = None  # on errors: tells the client how long to back off
    omit_usage: bool = False  # some compatible servers send no usage at all
    echo_key: bool = False  # on errors: the message quotes the request's key, as some 401s do


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) drops connections when hundreds of a gevent worker's
    # tasks call at once (bench/worker_pool.py); a dropped SYN costs the caller a 1 s
    # retransmit. Each request gets a thread of its own, so 256 can wait out a delay at once.
    request_queue_size = 1024


class FakeOpenAI:
    """An OpenAI-compatible server on 127.0.0.1, in a daemon thread.

    `keep_alive`: answer in HTTP/1.1 and keep each connection for the client's next call,
    as real providers do (a benchmark); by default every call has a connection of its own.
    `port`: 0 (the default) takes a free one.
    """

    def __init__(self, *, keep_alive: bool = False, port: int = 0) -> None:
        self.keep_alive = keep_alive
        self.port = port
        self._lock = threading.Lock()
        self._default = Reply()
        self._queue: deque[Reply] = deque()
        self._requests: list[dict[str, Any]] = []
        self._received_at: list[float] = []  # time.time() of each call, as `requests`
        self._calls = 0
        self._in_flight = 0
        self._responder: Callable[[dict[str, Any]], Reply | str] | None = None
        self._embedding_requests: list[dict[str, Any]] = []
        self._embeddings_reply = Reply(content=None)
        self._embeddings_responder: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        server = _Server(("127.0.0.1", self.port), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._stopping.clear()
        # A short poll interval: shutdown() waits for the loop to notice, at every stop.
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes slow answers so their threads end promptly
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # --- scripting --------------------------------------------------------------------

    def answer(self, content: str) -> None:
        """Every call answers `content` as the assistant message."""
        self._set_default(Reply(content=content))

    def answer_json(self, obj: object) -> None:
        self.answer(json.dumps(obj))

    def fail(
        self, status: int = 500, *, retry_after_ms: int | None = None, echo_key: bool = False
    ) -> None:
        """Every call answers HTTP `status` with an OpenAI-style error body (`echo_key`:
        quoting the key the call came with)."""
        self._set_default(
            Reply(content=None, status=status, retry_after_ms=retry_after_ms, echo_key=echo_key)
        )

    def slow(self, seconds: float, content: str = "{}") -> None:
        """Every call waits `seconds` before answering `content`."""
        self._set_default(Reply(content=content, delay_s=seconds))

    def answer_with(self, responder: Callable[[dict[str, Any]], Reply | str]) -> None:
        """Every call answers what `responder` makes of its request body (a str is a content)."""
        with self._lock:
            self._default = Reply()
            self._queue.clear()
            self._responder = responder

    def queue(self, *responses: Reply | str) -> None:
        """The next calls answer these, in order (a str is a content); then the default."""
        with self._lock:
            self._queue.extend(r if isinstance(r, Reply) else Reply(content=r) for r in responses)

    def embeddings_fail(self, status: int = 500, *, echo_key: bool = False) -> None:
        """Every embeddings call answers HTTP `status` (`echo_key`: quoting the call's key)."""
        with self._lock:
            self._embeddings_reply = Reply(content=None, status=status, echo_key=echo_key)

    def embeddings_slow(self, seconds: float) -> None:
        """Every embeddings call waits `seconds` before answering its vectors."""
        with self._lock:
            self._embeddings_reply = Reply(content=None, delay_s=seconds)

    def embeddings_answer_with(self, responder: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Every embeddings call answers the JSON `responder` makes of its request body."""
        with self._lock:
            self._embeddings_reply = Reply(content=None)
            self._embeddings_responder = responder

    def _set_default(self, reply: Reply) -> None:
        with self._lock:
            self._default = reply
            self._queue.clear()
            self._responder = None

    # --- what was asked -----------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat-completion calls so far, oldest first.

        The live list (appended under a lock), so `fake.requests.clear()` resets it.
        """
        return self._requests

    @property
    def embedding_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the embeddings calls so far, oldest first (the live list)."""
        return self._embedding_requests

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    @calls.setter
    def calls(self, value: int) -> None:
        with self._lock:
            self._calls = value

    @property
    def received_at(self) -> list[float]:
        """When each chat-completion call arrived (`time.time()`), oldest first."""
        with self._lock:
            return list(self._received_at)

    @property
    def in_flight(self) -> int:
        """Calls received and not yet answered (waiting out their delay, say)."""
        with self._lock:
            return self._in_flight

    def reset(self) -> None:
        """Forget the calls so far and the script: every call answers `{}` again."""
        with self._lock:
            self._requests.clear()
            self._received_at.clear()
            self._calls = 0
            self._queue.clear()
            self._default = Reply()
            self._responder = None
            self._embedding_requests.clear()
            self._embeddings_reply = Reply(content=None)
            self._embeddings_responder = None

    def _next_embeddings(
        self, body: dict[str, Any]
    ) -> tuple[Reply, Callable[[dict[str, Any]], dict[str, Any]] | None]:
        with self._lock:
            self._embedding_requests.append(body)
            return self._embeddings_reply, self._embeddings_responder

    def _next(self, body: dict[str, Any]) -> tuple[Reply, int]:
        with self._lock:
            self._requests.append(body)
            self._received_at.append(time.time())
            self._calls += 1
            if self._queue:
                return self._queue.popleft(), self._calls
            responder, default, number = self._responder, self._default, self._calls
        if responder is None:
            return default, number
        # Outside the lock: a responder may take its time or look at the server.
        reply = responder(body)
        return (reply if isinstance(reply, Reply) else Reply(content=reply)), number

    def _enter(self, delta: int) -> None:
        with self._lock:
            self._in_flight += delta

    def _wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)


def _completion(reply: Reply, body: dict[str, Any], number: int) -> dict[str, Any]:
    messages = body.get("messages") or []
    prompt_chars = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
    prompt, completion = reply.usage or (prompt_chars // 4, len(reply.content or "") // 4)
    answer: dict[str, Any] = {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model or str(body.get("model") or "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
    }
    if not reply.omit_usage:
        answer["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return answer


def _embeddings(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The stand-in's vectors of the request's inputs, or a 400 as OpenAI's for a bad one."""
    texts = body.get("input")
    texts = [texts] if isinstance(texts, str) else texts
    dimensions = body.get("dimensions") or DIMENSIONS
    if (
        not isinstance(texts, list)
        or not texts
        or not all(isinstance(t, str) and t for t in texts)
        or not isinstance(dimensions, int)
        or dimensions < 1
    ):
        return 400, _error(400)
    data = []
    for index, text in enumerate(texts):
        vector: Any = embedding(text, dimensions)
        if body.get("encoding_format") == "base64":  # the openai client's default
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = sum(len(text.split()) for text in texts)
    answer = {
        "object": "list",
        "data": data,
        "model": str(body.get("model") or "fake-embeddings"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return 200, answer


def _error(status: int, key: str | None = None) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    message = f"scripted failure (HTTP {status})"
    if key is not None:
        message = f"Incorrect API key provided: {key}. {message}"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if fake.keep_alive else "HTTP/1.0"
        # On a kept connection, Nagle would hold the body back behind the headers' ACK.
        disable_nagle_algorithm = fake.keep_alive

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                self._send(404, _error(404))
                return
            model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "tests"}
            self._send(200, {"object": "list", "data": [model]})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            path = self.path.rstrip("/")
            if path not in ("/v1/chat/completions", "/v1/embeddings"):
                self._send(404, _error(404))
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, _error(400))
                return
            if path == "/v1/embeddings":
                self._embed(body if isinstance(body, dict) else {})
                return
            fake._enter(1)
            try:
                self._answer(body if isinstance(body, dict) else {})
            finally:
                fake._enter(-1)

        def _embed(self, body: dict[str, Any]) -> None:
            reply, responder = fake._next_embeddings(body)
            if reply.delay_s:
                fake._wait(reply.delay_s)
            if reply.status != 200:
                self._send(reply.status, self._error_of(reply))
            elif responder is not None:
                self._send(200, responder(body))
            else:
                self._send(*_embeddings(body))

        def _answer(self, body: dict[str, Any]) -> None:
            reply, number = fake._next(body)
            if reply.delay_s:
                fake._wait(reply.delay_s)
            if reply.status != 200:
                headers = {}
                if reply.retry_after_ms is not None:
                    headers["retry-after-ms"] = str(reply.retry_after_ms)
                self._send(reply.status, self._error_of(reply), headers)
                return
            self._send(200, _completion(reply, body, number))

        def _error_of(self, reply: Reply) -> dict[str, Any]:
            authorization = self.headers.get("Authorization") or ""
            key = authorization.removeprefix("Bearer ") if reply.echo_key else None
            return _error(reply.status, key)

        def _send(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except ConnectionError:
                pass  # the client gave up (a timeout test); nothing to answer

        def finish(self) -> None:
            with contextlib.suppress(ConnectionError):  # a client that hung up early
                super().finish()

    return Handler


def what_reached_me(body: dict[str, Any]) -> str:
    """The stand-in's answer: how many messages the model was sent, and the user's last."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    said = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    return f"(offline stand-in model) {len(messages)} messages reached me; the last: {said!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="An offline OpenAI-compatible stand-in model.")
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args(argv)
    server = FakeOpenAI(port=args.port)
    server.answer_with(what_reached_me)
    server.start()
    print(f"stand-in model at {server.base_url} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
