"""docs/contract.md names what programs outside the repository rely on, and it stays whole:
every environment variable a process reads, every `driftless` command and every route
of the web app is in it ([4.3]: the contract was cited by the code but not in the
repository). A new variable, command or route fails here until the contract says it."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from shared.infra.config import ENVIRONMENT, Settings
from worker.cli import main

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
# Read outside the settings, by name: logging (shared/infra/logs.py), the metrics'
# shared directory (worker/multiproc.py), the MCP server's key (web/mcp/cli.py).
OTHER_VARIABLES = ("LOG_LEVEL", "PROMETHEUS_MULTIPROC_DIR", "DRIFTLESS_API_KEY")


def contract() -> str:
    return CONTRACT.read_text()


def commands(group: click.Group, ctx: click.Context, prefix: str) -> list[str]:
    """Every leaf command of `group`, spelled as typed ("driftless db upgrade")."""
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            found += commands(command, click.Context(command, parent=ctx), f"{prefix} {name}")
        else:
            found.append(f"{prefix} {name}")
    return found


def skeleton(path: str) -> str:
    """A route with its parameters unnamed: `/a/<sid>/b` and `/a/{sid}/b` are `/a/{}/b`."""
    return re.sub(r"<(?:[a-z]+:)?[a-z_]+>|\{[A-Za-z_]+\}", "{}", path)


def documented_routes(text: str) -> set[tuple[str, str]]:
    """(method, skeleton) of every `METHOD /path` the contract writes in backticks; a row
    `PUT /agents-api/provider`, `GET`, `DELETE` names the same path's other methods."""
    routes: set[tuple[str, str]] = set()
    for line in text.splitlines():
        path = None
        for method, rest in re.findall(r"`(GET|PUT|POST|DELETE|PATCH)(?: ([^`?]+))?[^`]*`", line):
            path = rest or path
            if path is not None:
                routes.add((method, skeleton(path.strip())))
    return routes


def app_routes() -> set[tuple[str, str]]:
    from web.app import create_app

    settings = Settings(database_url="postgresql://unused/unused", redis_url="redis://unused/0")
    app = create_app(settings)
    return {
        (method, skeleton(rule.rule.rstrip("/") or "/"))
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }


@pytest.mark.parametrize("variable", [*ENVIRONMENT, *OTHER_VARIABLES])
def test_every_environment_variable_is_in_the_contract_43(variable: str) -> None:
    assert f"`{variable}`" in contract(), f"{variable} is read but not in docs/contract.md"


def test_every_driftless_command_is_in_the_contract_43() -> None:
    text = contract()
    found = commands(main, click.Context(main), "driftless")
    assert "driftless mcp" in found and "driftless db upgrade" in found  # the walk sees all
    missing = [name for name in found if f"`{name}" not in text]
    assert missing == [], f"not in docs/contract.md: {missing}"


def test_every_route_is_in_the_contract_43() -> None:
    routes = app_routes()
    assert ("POST", "/agents-api/sessions/{}/messages") in routes  # the app's own rules
    missing = sorted(routes - documented_routes(contract()))
    assert missing == [], f"routes not in docs/contract.md: {missing}"


def test_the_route_reading_is_not_vacuous_43() -> None:
    assert documented_routes("| `PUT /a/{x}`, `GET`, `DELETE` | `GET /b?c=` |") == {
        ("PUT", "/a/{}"), ("GET", "/a/{}"), ("DELETE", "/a/{}"), ("GET", "/b"),
    }  # fmt: skip
    assert ("GET", "/agents-api/nowhere") not in documented_routes(contract())


def test_nothing_cites_a_contract_that_is_not_in_the_repository_43() -> None:
    root = CONTRACT.parents[1]
    citing = [
        path.relative_to(root)
        for folder in ("shared", "web", "worker", "deploy", "docs", "client", "bench", "tests")
        for path in (root / folder).rglob("*")
        if path.is_file() and path.suffix in {".py", ".md", ".yaml", ".yml", ".toml", ""}
        and "CONTRACT.md" in path.read_text(errors="replace")
        and path != Path(__file__).resolve()
    ]  # fmt: skip
    assert "CONTRACT.md" not in (root / "Procfile").read_text()
    assert citing == [], f"cite docs/contract.md instead: {citing}"
