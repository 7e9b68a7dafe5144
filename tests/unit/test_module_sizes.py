"""Sizes STYLE.md asks for: the console's JavaScript modules stay under the length a module
is split at (about 400 lines), each drawing one part of the page; and a view parses,
calls one service function and serializes, in at most 20 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "web" / "console"
VIEWS = ROOT / "web" / "views"
MAX_LINES = 400
MAX_VIEW_LINES = 20


def test_every_console_module_is_at_most_400_lines() -> None:
    modules = sorted(CONSOLE.glob("*.js"))
    assert {"console.js", "session.js"} <= {m.name for m in modules}  # the folder is here
    too_long = {m.name: n for m in modules if (n := len(m.read_text().splitlines())) > MAX_LINES}
    assert too_long == {}, f"split these by what they draw: {too_long}"


def _view_lengths() -> dict[str, int]:
    """Each routed function's body, its docstring left out, in lines."""
    lengths = {}
    for module in sorted(VIEWS.glob("*.py")):
        for node in ast.parse(module.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or not node.decorator_list:
                continue
            body = node.body[1:] if ast.get_docstring(node) else node.body
            lengths[f"{module.stem}.{node.name}"] = body[-1].end_lineno - body[0].lineno + 1
    return lengths


def test_every_view_is_at_most_20_lines() -> None:
    lengths = _view_lengths()
    assert {"sessions.post_messages", "live.events"} <= lengths.keys()  # the views are found
    too_long = {name: n for name, n in lengths.items() if n > MAX_VIEW_LINES}
    assert too_long == {}, f"move their logic into a service function: {too_long}"
