"""driftless-client installs alone: it depends on httpx and nothing else, and none of its
modules imports anything but the standard library and httpx (no flask, celery,
sqlalchemy, nor the server's own packages)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import driftless_client
from tests.imports import top_level_imports

CLIENT = Path(__file__).resolve().parents[2] / "client"


def test_the_distribution_depends_on_httpx_alone() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "driftless-client"
    assert project["dependencies"] == ["httpx>=0.27,<1"]  # a range: beside an agent's own httpx
    assert "optional-dependencies" not in project


def test_no_module_imports_anything_but_the_standard_library_and_httpx() -> None:
    modules = sorted((CLIENT / "driftless_client").glob("*.py"))
    assert CLIENT / "driftless_client" / "__init__.py" in modules
    found = top_level_imports(modules)
    allowed = sys.stdlib_module_names | {"httpx", "__future__"}
    assert {name: where.name for name, where in found.items() if name not in allowed} == {}
    assert "httpx" in found


def test_the_package_is_typed_and_exports_its_clients_and_error() -> None:
    assert (CLIENT / "driftless_client" / "py.typed").exists()
    assert set(driftless_client.__all__) == {"ApiError", "AsyncClient", "Client", "__version__"}
