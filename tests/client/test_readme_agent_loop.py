"""The README's agent loop (the `agent.py` it asks to save) runs as printed: the real
`openai` client (against tests/llm_server.py), driftless_client against the real system,
one turn, then `quit`. tests/e2e/test_readme_blocks.py runs it as the README's bash block
does, against `driftless up`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from driftless_client import Client
from tests.client.conftest import System
from tests.llm_server import FakeOpenAI
from tests.readme_blocks import saved_files

README = Path(__file__).resolve().parents[2] / "README.md"


def agent_loop() -> str:
    """The python block of the README's "Client library" section, saved as agent.py."""
    section = README.read_text().split("## Client library\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section shows one python example"
    assert saved_files()["agent.py"] == blocks[0]
    return str(blocks[0])


def test_the_readme_shows_an_agent_loop_of_about_twenty_lines() -> None:
    lines = [line for line in agent_loop().splitlines() if line.strip()]
    assert len(lines) <= 22
    assert "context=True" in agent_loop()


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        server.answer("Launch on Friday, after the billing freeze.")
        yield server


def test_the_readme_agent_loop_stores_both_turns_and_sends_the_context_to_the_model(
    system: System,
    org_key: str,
    model: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
    monkeypatch.setenv("DRIFTLESS_URL", system.base_url)
    monkeypatch.setenv("DRIFTLESS_API_KEY", org_key)
    typed = iter(["When do we launch?", "quit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed))

    exec(compile(agent_loop(), str(README), "exec"), {"__name__": "readme"})

    assert "agent> Launch on Friday, after the billing freeze." in capsys.readouterr().out
    (sent,) = model.requests
    assert sent["messages"][-1] == {"role": "user", "content": "When do we launch?"}
    with Client(system.base_url, org_key) as client:
        (session,) = client.sessions("planner", "ada")["sessions"]
        stored = client.messages(session["id"])["messages"]
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "When do we launch?"),
        ("assistant", "Launch on Friday, after the billing freeze."),
    ]
