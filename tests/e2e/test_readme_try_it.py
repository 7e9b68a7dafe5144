"""The README's "Try it" runs as pasted: its bash block against `driftless up`, where the
only change is the port (the README says 8000; the test system listens on a free one)."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.test_up import up_process  # noqa: F401  (the fixture: `driftless up`, free port)
from tests.helpers import wait_for

README = Path(__file__).resolve().parents[2] / "README.md"


def try_it_block() -> str:
    """The first ```bash block under "## Try it"."""
    section = README.read_text().split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert found, 'README.md has no ```bash block under "## Try it"'
    return found.group(1)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's block needs curl")
def test_readme_try_it_runs_as_pasted(up_process, tmp_path: Path) -> None:  # noqa: F811
    process, port = up_process
    printed: list[str] = []
    for line in process.stdout:
        printed.append(line.strip())
        if line.startswith("dl_"):
            break
    # `driftless up` keeps the printed key in $DRIFTLESS_HOME/dev-key (the fixture's
    # tmp_path): seen from a checkout, that is .driftless/dev-key, where the block reads it.
    assert (tmp_path / "dev-key").read_text().strip() == printed[-1]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".driftless").symlink_to(tmp_path)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                return answer.status == 200
        except OSError:
            return False

    wait_for(ready, what="the web process")
    block = try_it_block()
    assert "localhost:8000" in block
    run = subprocess.run(
        ["bash", "-c", block.replace("localhost:8000", f"localhost:{port}")],
        cwd=checkout, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert '"status": "closed"' in run.stdout
    assert '"summarySource": "llm"' in run.stdout  # summarized by the worker, not pending
    assert '"memoryState": "promoted"' in run.stdout, run.stdout
