"""The console's JavaScript modules stay under the length STYLE.md asks a module to be
split at (about 400 lines): each draws one part of the page."""

from __future__ import annotations

from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "web" / "console"
MAX_LINES = 400


def test_every_console_module_is_at_most_400_lines() -> None:
    modules = sorted(CONSOLE.glob("*.js"))
    assert {"console.js", "session.js"} <= {m.name for m in modules}  # the folder is here
    too_long = {m.name: n for m in modules if (n := len(m.read_text().splitlines())) > MAX_LINES}
    assert too_long == {}, f"split these by what they draw: {too_long}"
