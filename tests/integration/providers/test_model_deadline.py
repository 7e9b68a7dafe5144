"""One deadline per call to an org's own model (DRIFTLESS_LLM_TIMEOUT_S): a server that
drips its answer a byte at a time is cut off at the deadline, not when it finishes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from shared.llm.base import LLMError, SummaryRequest, TranscriptLine
from shared.llm.openai_provider import OpenAIProvider
from shared.providers.pinning import PinnedBackend

DRIP_S = 0.1  # a byte every tenth of a second
DEADLINE_S = 1.0
ANSWER = json.dumps({
    "id": "x", "object": "chat.completion", "created": 0, "model": "own",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant",
        "content": json.dumps({"title": "T", "summary": "S", "include_in_memory": True}),
    }}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()  # fmt: skip


@dataclass
class Drip:
    sent: int = 0
    broken: bool = False
    ended: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def dripping() -> Iterator[tuple[str, Drip]]:
    drip = Drip()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(ANSWER)))
            self.end_headers()
            try:
                for byte in ANSWER:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    drip.sent += 1
                    time.sleep(DRIP_S)
            except OSError:
                drip.broken = True
            drip.ended.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", drip
    server.shutdown()
    server.server_close()


def test_a_dripping_own_model_is_cut_off_at_the_calls_deadline_41(
    dripping: tuple[str, Drip],
) -> None:
    base_url, drip = dripping
    assert len(ANSWER) * DRIP_S > 20 * DEADLINE_S  # the whole answer: over 20 deadlines
    provider = OpenAIProvider(
        api_key="sk-own", base_url=base_url, model="own", timeout_s=DEADLINE_S, max_retries=2,
        network_backend=PinnedBackend(allow_private=True),
    )  # fmt: skip
    with provider, pytest.raises(LLMError):
        provider.summarize(SummaryRequest(lines=[TranscriptLine(1, "user", "hi")]))
    # The client hung up mid-answer, about when the one deadline came (retries included).
    assert drip.ended.wait(5 * DEADLINE_S + 5)
    assert drip.broken
    assert drip.sent * DRIP_S < 3 * DEADLINE_S
