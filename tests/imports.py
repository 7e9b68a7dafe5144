"""What Python modules import, read with `ast` (nothing is imported to find out)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path


def top_level_imports(modules: Iterable[Path]) -> dict[str, Path]:
    """Each top-level name the modules import absolutely -> the first module importing it.

    Relative imports stay inside their package and are left out; `import a.b` counts as `a`.
    """
    found: dict[str, Path] = {}
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], module)
    return found
