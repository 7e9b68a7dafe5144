"""Every ```bash block of the README runs as pasted, offline, against the real system.

The system is `driftless up` started as `make run` starts it: one Redis for data and
broker, the dev key kept in `$DRIFTLESS_HOME/dev-key`. The only differences are where
its servers are (the test's PostgreSQL and Redis, not the embedded ones: the README's
commands are given the same `DATABASE_URL` and `REDIS_URL`, as the README tells a reader
with their own servers) and the port (a free one, given as `PORT`, as the README tells a
reader who gave `make run` one). The blocks run in README order in one bash session, from
a directory that looks like the checkout (`.driftless/`, `.venv/`, `tests/`, and the
`agent.py` the README asks to save). No OpenAI key: the agent loop runs on the stand-in
model the README starts. Blocks marked `<!-- not run by tests: REASON -->` are skipped;
tests/unit/test_docs_in_sync.py keeps them few.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.up import DRIFTLESS, stop_up, up_environment
from tests.faults.procs import free_port
from tests.readme_blocks import Block, bash_blocks, saved_files

REPOSITORY = Path(__file__).resolve().parents[2]
TYPED = "When do we launch?\nquit\n"  # what the reader types into the agent loop
RUN_TIMEOUT_S = 240


@dataclass
class System:
    port: int
    home: Path
    key: str
    env: dict[str, str]


@pytest.fixture
def make_run(database_url: str, redis_url: str, tmp_path: Path) -> Iterator[System]:
    """`driftless up`, as `make run` runs it, on the test's servers and a free port."""
    home = tmp_path / "home"
    env = up_environment(
        database_url=database_url, redis_url=redis_url, home=home, port=free_port(),
        own_broker=False,
    )  # fmt: skip
    log = (tmp_path / "up.log").open("w")  # its processes' logs, to read when this fails
    process = subprocess.Popen(
        [DRIFTLESS, "up"], env=env, stdout=subprocess.PIPE, stderr=log, text=True
    )
    assert process.stdout is not None
    # Keep reading what it prints after the banner, so a full pipe never stalls it.
    drain = threading.Thread(target=process.stdout.read, daemon=True)
    try:
        key = ""
        for line in process.stdout:  # the banner ends with the dev key
            if line.startswith("dl_"):
                key = line.strip()
                break
        assert key, "`driftless up` ended before printing the dev key"
        drain.start()
        yield System(port=int(env["PORT"]), home=home, key=key, env=env)
    finally:
        stop_up(process, signal.SIGINT)
        if drain.is_alive():
            drain.join(timeout=10)
        process.stdout.close()
        log.close()


def _checkout(system: System, root: Path) -> Path:
    """A directory a reader would paste in: the checkout's paths the blocks use."""
    root.mkdir()
    (root / ".driftless").symlink_to(system.home)
    (root / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (root / "tests").symlink_to(REPOSITORY / "tests")
    for name, code in saved_files().items():
        (root / name).write_text(code)
    return root


def _script(blocks: list[Block]) -> str:
    """The blocks in order, each between markers on stdout and stderr; a failing command
    (non-zero status, outside a condition) is reported on stderr without stopping anything."""
    parts = ["trap 'echo \"@@failed: $BASH_COMMAND\" >&2' ERR"]
    for number, block in enumerate(blocks):
        parts.append(f'echo "@@block {number}@@"; echo "@@block {number}@@" >&2')
        parts.append(block.code)
    return "\n".join(parts) + "\n"


def _split(output: str, count: int) -> list[str]:
    pieces = []
    for number in range(count):
        after = output.split(f"@@block {number}@@\n", 1)[1]
        pieces.append(after.split(f"@@block {number + 1}@@\n", 1)[0])
    return pieces


def _answers(stdout: str) -> list[Any]:
    """The JSON documents a block printed, one a line or pretty-printed."""
    documents: list[Any] = []
    decoder = json.JSONDecoder()
    text = stdout
    while text:
        start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
        if start < 0:
            break
        try:
            document, end = decoder.raw_decode(text, start)
        except ValueError:
            text = text[start + 1 :]
            continue
        documents.append(document)
        text = text[end:]
    return documents


def _get(system: System, path: str) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{system.port}/agents-api{path}",
        headers={"Authorization": f"Bearer {system.key}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


# What a block shows, by a line only it has: the checks below must each find their block.
TRY_IT = "/sessions/$SID/messages"
KEYS = ".venv/bin/driftless keys list dev"
AGENT_LOOP = "agent.py"
WEBHOOKS = "$API/webhooks"
REEVALUATIONS = "$API/reevaluations"


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's blocks need curl")
def test_every_bash_block_of_the_readme_runs_as_pasted(make_run: System, tmp_path: Path) -> None:
    system = make_run
    blocks = [block for block in bash_blocks() if block.not_run is None]
    assert (system.home / "dev-key").read_text().strip() == system.key  # where Try it reads it

    run = subprocess.run(
        ["bash", "-c", _script(blocks)],
        cwd=_checkout(system, tmp_path / "checkout"), env=system.env, input=TYPED,
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, start_new_session=True,
    )  # fmt: skip
    outputs = dict(zip(blocks, _split(run.stdout, len(blocks)), strict=True))
    errors = dict(zip(blocks, _split(run.stderr, len(blocks)), strict=True))

    def the(marker: str) -> tuple[str, str]:
        (block,) = [b for b in blocks if marker in b.code]
        return outputs[block], errors[block]

    for block in blocks:
        err = errors[block]
        assert "@@failed" not in err, f"{block}: a command failed:\n{err}"
        assert "command not found" not in err and "No such file" not in err, f"{block}: {err}"
        refusals = [a for a in _answers(outputs[block]) if isinstance(a, dict) and "error" in a]
        if WEBHOOKS not in block.code:  # the one block that shows a refusal
            assert not refusals, f"{block} got error answers: {refusals}"

    stdout, _ = the(TRY_IT)
    assert '"status": "closed"' in stdout
    assert '"summarySource": "llm"' in stdout, stdout  # summarized by the worker, not pending
    assert '"memoryState": "promoted"' in stdout, stdout

    stdout, _ = the(KEYS)
    prefixes = [line.split()[0] for line in stdout.splitlines()[1:] if line.strip()]
    assert any(system.key.startswith(prefix) for prefix in prefixes), stdout

    stdout, _ = the(AGENT_LOOP)
    assert "agent> (offline stand-in model)" in stdout, stdout
    assert "the last: 'When do we launch?'" in stdout
    newest = _get(system, "/sessions?agentId=planner&userId=ada")["sessions"][0]
    stored = _get(system, f"/sessions/{newest['id']}/messages")["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[0]["content"] == "When do we launch?"
    assert stored[1]["content"].startswith("(offline stand-in model)")

    stdout, _ = the(WEBHOOKS)
    refused, listed = _answers(stdout)
    assert refused["error"]["code"] == "validation_error"
    assert refused["error"]["message"].startswith("url: ")
    assert listed == {"webhooks": []}  # nothing was stored

    stdout, _ = the(REEVALUATIONS)
    started, progress = _answers(stdout)[:2]
    assert started["state"] == "running" and started["total"] == 2  # Try it's topic, the loop's
    assert progress["id"] == started["id"]
    assert "finished: " in stdout.splitlines()[-1], stdout  # the CLI followed its campaign
