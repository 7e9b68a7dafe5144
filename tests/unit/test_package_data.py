"""Every file the processes read at run time ships in the wheel the image installs.

The Dockerfile installs the project as a wheel (`pip install --no-deps .`), which carries
Python modules and only the other files `[tool.setuptools.package-data]` names: a
console file or a migration left out works in a checkout and is missing in production
(the console's JavaScript was, until it was listed).
"""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "web", "worker")


def _tracked_data_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [path for path in listed if not path.endswith(".py")]


def _shipped(path: str, package_data: dict[str, list[str]]) -> bool:
    package, _, inside = path.partition("/")
    return any(fnmatch.fnmatch(inside, glob) for glob in package_data.get(package, []))


def test_every_data_file_of_the_packages_is_named_in_package_data() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"]["package-data"]
    data_files = _tracked_data_files()
    assert "web/console/index.html" in data_files
    assert [path for path in data_files if not _shipped(path, package_data)] == []
