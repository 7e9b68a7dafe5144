"""Every package the code imports is declared by the distribution that ships the code.

An import that works only because another dependency happens to install its package
(werkzeug through flask, starlette through mcp) breaks the day that dependency drops or
moves it, and a lock made from the declared list would not pin it on purpose. Each
module's top-level imports are read with `ast` and mapped to the distribution that
installs them here; that distribution must be named in the pyproject whose code imports
it: shared/, web/ and worker/ in the root's `[project].dependencies`, client/ in its
own, tests/ in either or in the extras `make install` installs.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

from tests.imports import top_level_imports

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"shared", "web", "worker", "driftless_client", "tests", "bench"}
# The extras `make install` installs: what the tests may import beyond the runtime's.
TEST_EXTRAS = ("dev", "embedded")


def _normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them (pydantic_core = Pydantic-Core)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: list[str]) -> set[str]:
    """The distribution names of PEP 508 requirements (`celery[redis]==5.7.0` -> celery)."""
    found = (re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement) for requirement in requirements)
    return {_normalized(match.group()) for match in found if match}


def _project(pyproject: Path) -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads(pyproject.read_text())["project"]
    return project


def _runtime(pyproject: Path) -> set[str]:
    return _names(_project(pyproject)["dependencies"])


def _extras(pyproject: Path, *extras: str) -> set[str]:
    optional = _project(pyproject)["optional-dependencies"]
    return {name for extra in extras for name in _names(optional[extra])}


def _imports(*folders: str) -> dict[str, str]:
    """Each third-party top-level module imported under the folders -> one file importing it."""
    modules = [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]
    return {
        name: str(module.relative_to(ROOT))
        for name, module in top_level_imports(modules).items()
        if name not in sys.stdlib_module_names and name not in FIRST_PARTY
    }


def _undeclared(imports: dict[str, str], declared: set[str]) -> dict[str, str]:
    """Imports no declared distribution provides: module -> a file importing it, its source."""
    installers = packages_distributions()
    missing = {}
    for module, where in imports.items():
        distributions = {_normalized(name) for name in installers.get(module, [])}
        if not distributions & declared:
            by = ", ".join(sorted(distributions)) or "none installed here"
            missing[module] = f"{where} (distribution: {by})"
    return missing


ROOT_PYPROJECT = ROOT / "pyproject.toml"
CLIENT_PYPROJECT = ROOT / "client" / "pyproject.toml"


def test_the_servers_import_only_their_declared_dependencies_43() -> None:
    imports = _imports("shared", "web", "worker")
    assert {"flask", "celery", "sqlalchemy", "werkzeug"} <= imports.keys()  # the scan sees them
    assert _undeclared(imports, _runtime(ROOT_PYPROJECT)) == {}


def test_the_client_imports_only_its_declared_dependency_43() -> None:
    imports = _imports("client/driftless_client")
    assert "httpx" in imports
    assert _undeclared(imports, _runtime(CLIENT_PYPROJECT)) == {}


def test_the_tests_import_only_what_make_install_declares_43() -> None:
    imports = _imports("tests")
    assert {"pytest", "yaml"} <= imports.keys()
    declared = (
        _runtime(ROOT_PYPROJECT)
        | _extras(ROOT_PYPROJECT, *TEST_EXTRAS)
        | _runtime(CLIENT_PYPROJECT)
    )
    assert _undeclared(imports, declared) == {}


def test_an_import_installed_only_by_another_package_is_reported_43() -> None:
    """The check itself: werkzeug with flask alone declared is missing, naming its installer."""
    missing = _undeclared({"werkzeug": "web/errors.py", "flask": "web/app.py"}, {"flask"})
    assert missing == {"werkzeug": "web/errors.py (distribution: werkzeug)"}
