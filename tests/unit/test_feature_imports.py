"""The feature packages of shared/ (shared/<name>/) import each other without cycles.

A reader following one job goes down the layers and never back up: no two feature
packages may import each other, directly or through others. The modules of the plumbing
(shared/infra/) and of the shared vocabulary (shared/domain/) are not features: each counts
as a stop of its own on the way, so a cycle through them is found too.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

import shared

SHARED = Path(shared.__file__).parent
NOT_FEATURES = {"infra", "domain"}
FEATURES = sorted(
    p.name
    for p in SHARED.iterdir()
    if p.is_dir() and (p / "__init__.py").exists() and p.name not in NOT_FEATURES
)


def _node(module: str) -> str:
    """shared.topics.models → shared.topics; shared.infra.db.uow → shared.infra.db."""
    parts = module.split(".")
    depth = 3 if len(parts) > 2 and parts[1] in NOT_FEATURES else 2
    return ".".join(parts[:depth])


def _graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("shared")
    edges: dict[str, set[str]] = {}
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            a, b = _node(importer), _node(imported)
            if a != b and b.startswith("shared."):
                edges.setdefault(a, set()).add(b)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of two or more nodes (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [_a_cycle(edges, group) for group in groups]


def _a_cycle(edges: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest cycle through the group's first node, for the failure message."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(edges.get(node, set()) & group):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in {group}")


def test_feature_packages_import_each_other_without_cycles() -> None:
    cycles = [c for c in _cycles(_graph()) if len({n for n in c if _is_feature(n)}) > 1]
    assert not cycles, "feature packages in an import cycle:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def _is_feature(node: str) -> bool:
    return node.removeprefix("shared.") in FEATURES


def test_the_cycle_finder_finds_a_cycle_through_a_plain_module() -> None:
    edges = {
        "shared.a": {"shared.glue"},
        "shared.glue": {"shared.b"},
        "shared.b": {"shared.a", "shared.c"},
    }
    assert _cycles(edges) == [["shared.a", "shared.glue", "shared.b", "shared.a"]]
    assert _cycles({"shared.a": {"shared.b"}, "shared.b": {"shared.c"}}) == []


def test_the_import_contracts_name_every_feature_package() -> None:
    """pyproject.toml's contracts list the features infra and domain may not import: a
    feature missing from a list is a feature they could import unnoticed."""
    pyproject = tomllib.loads((SHARED.parent / "pyproject.toml").read_text())
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    features = {f"shared.{name}" for name in FEATURES}
    for source in ("shared.infra", "shared.domain"):
        (contract,) = [c for c in contracts if c.get("source_modules") == [source]]
        assert features - set(contract["forbidden_modules"]) == set(), contract["name"]
