"""docs/deploy.md names every process deploy/ runs, and its connection sums are deploy/'s.

A process added to compose or Kubernetes without its line here (worker-embeddings was)
leaves an operator counting PostgreSQL connections short; a line left after its
process is gone sends them looking for it. The doc's process tables (those headed
`process` or `service`) are read for the first `name` in backticks of each row, and its
PostgreSQL connections are computed again from the manifests: pool and overflow from
each container's environment (a gevent worker takes one connection per 16 greenlets, at
least the pool), processes from gunicorn's `--workers` or prefork's `--concurrency`, and
replicas from compose's `deploy.replicas` or Kubernetes' autoscalers' maxima.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import yaml

from shared.infra.config import load_settings
from tests.unit.test_deploy_manifests import (
    PROCFILE,
    _containers,
    _env,
    _of_kind,
    _option,
    _workloads,
)
from worker.context import GREENLETS_PER_CONNECTION

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
COMPOSE_FILES = sorted((ROOT / "deploy").glob("compose*.yaml"))
# The Procfile's `release` runs as compose's `migrate` service and Kubernetes' migrate Job.
RELEASE = "migrate"
# What compose's PostgreSQL (default settings) admits: max_connections (100) less the
# superuser's reserved 3 (docs/operations.md, "Connection budget").
POSTGRES_DEFAULT_CONNECTIONS = 97

Row = dict[str, str]


def _tables(text: str) -> list[list[Row]]:
    """Every Markdown table of `text`, each as its rows keyed by the header's cells."""
    tables, lines = [], text.splitlines()
    for at, line in enumerate(lines):
        if not line.startswith("|") or (at and lines[at - 1].startswith("|")):
            continue
        block = list(itertools.takewhile(lambda row: row.startswith("|"), lines[at:]))
        header, *rows = [[cell.strip() for cell in row.strip("|").split("|")] for row in block]
        tables.append([dict(zip(header, cells, strict=False)) for cells in rows[1:]])
    return [table for table in tables if table]


def _process_tables() -> list[list[Row]]:
    text = DEPLOY_DOC.read_text()
    return [table for table in _tables(text) if {"process", "service"} & table[0].keys()]


def _name(row: Row) -> str | None:
    """The row's process: the first name in backticks of its first cell (None: a total)."""
    found = re.search(r"`([^`]+)`", row.get("process", row.get("service", "")))
    return found.group(1) if found else None


def _named_in_doc() -> set[str]:
    return {name for table in _process_tables() for row in table if (name := _name(row))}


def _compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = {}
    for path in COMPOSE_FILES:
        services.update(yaml.safe_load(path.read_text())["services"])
    return services


def _kubernetes_name(workload: dict[str, Any]) -> str:
    return str(workload["metadata"]["name"]).removeprefix("driftless-")


def _process_ceiling(command: list[str], env: dict[str, str]) -> tuple[int, int]:
    """(pool, overflow) one process of `command` may hold, as worker/context.py sizes it."""
    settings = load_settings({k: v for k, v in env.items() if k.startswith("DRIFTLESS_DB_")})
    pool = settings.db_pool_size
    if "--pool" in command and _option(command, "--pool") == "gevent":
        greenlets = int(_option(command, "--concurrency"))
        pool = max(pool, math.ceil(greenlets / GREENLETS_PER_CONNECTION))
    return pool, settings.db_max_overflow


def _processes(command: list[str]) -> int:
    """Processes holding connections in one container: gunicorn's workers, prefork's children."""
    if command[0] == "gunicorn":
        return int(_option(command, "--workers"))
    if "--pool" in command and _option(command, "--pool") == "prefork":
        return int(_option(command, "--concurrency"))
    return 1


def _kubernetes_maximum(workload: dict[str, Any]) -> int:
    """The most pods a workload runs: its autoscaler's maximum, else its replicas."""
    name = workload["metadata"]["name"]
    for scaler in _of_kind("HorizontalPodAutoscaler") + _of_kind("ScaledObject"):
        if scaler["spec"]["scaleTargetRef"]["name"] == name:
            return int(scaler["spec"].get("maxReplicas", scaler["spec"].get("maxReplicaCount")))
    return int(workload["spec"].get("replicas", 1)) if workload["kind"] == "Deployment" else 1


def _leading(cell: str) -> list[int]:
    """The leading `A` or `A + B` of a cell (`8 + 4`, `1 + 1 a pool process`, `**47**`)."""
    found = re.match(r"\**(\d+)\**(?: \+ (\d+))?", cell)
    return [int(number) for number in found.groups() if number is not None] if found else []


def _numbers(cell: str) -> list[int]:
    numbers = _leading(cell)
    assert numbers, f"no number at the start of {cell!r}"
    return numbers


def _total(table: list[Row], column: str) -> tuple[int, int]:
    """(the sum of the column's rows that count connections, the total the table states)."""
    (stated,) = [row for row in table if _name(row) is None]
    counted = [_leading(row[column]) for row in table if _name(row)]
    return sum(numbers[0] for numbers in counted if numbers), _numbers(stated[column])[0]


def _table(first: str, column: str) -> list[Row]:
    """The one process table headed by `first` that has `column`."""
    (table,) = [t for t in _process_tables() if first in t[0] and column in t[0]]
    return table


# --- every process named, and nothing else --------------------------------------------


def test_every_compose_service_and_kubernetes_deployment_is_named_in_the_doc_43() -> None:
    named = _named_in_doc()
    assert {"worker-embeddings", "postgres", RELEASE} <= named  # the tables are read
    assert set(_compose_services()) - named == set()
    assert {_kubernetes_name(d) for d in _of_kind("Deployment")} - named == set()


def test_the_doc_names_no_process_that_deploy_does_not_run_43() -> None:
    running = set(_compose_services()) | {_kubernetes_name(w) for w in _workloads()}
    assert _named_in_doc() - running - set(PROCFILE) == set()


def test_the_table_reader_names_a_row_by_its_first_name_in_backticks_43() -> None:
    """The table reader itself: a row's name is its first cell's first name in backticks."""
    table = "| process | command |\n| --- | --- |\n| ↳ `worker-x` (compose) | `celery` |\n"
    (rows,) = _tables(table)
    assert [_name(row) for row in rows] == ["worker-x"]


# --- the connection counts -------------------------------------------------------------


def test_each_process_holds_the_connections_the_process_table_says_43() -> None:
    table = _table("process", "PostgreSQL connections")
    services = _compose_services()
    workloads = {_kubernetes_name(w): w for w in _workloads()}
    checked = set()
    for row in table:
        name = _name(row)
        deployed = RELEASE if name == "release" else name
        stated = _numbers(row["PostgreSQL connections"])
        ceilings = set()
        if deployed in services:
            service = services[deployed]
            ceilings.add(_process_ceiling(service["command"], service["environment"]))
        if deployed in workloads:
            (container,) = _containers(workloads[deployed])
            ceilings.add(_process_ceiling(container["command"], _env(container)))
        if not ceilings:  # the Procfile's alone: the defaults
            ceilings.add(_process_ceiling(PROCFILE[str(name)], {}))
        assert len(ceilings) == 1, (name, ceilings)  # compose and Kubernetes agree
        (ceiling,) = ceilings
        assert stated == (list(ceiling) if len(stated) == 2 else [sum(ceiling)]), name
        checked.add(name)
    assert checked == set(PROCFILE) | {_kubernetes_name(d) for d in _of_kind("Deployment")}


def test_the_compose_sum_is_what_its_services_may_hold_43() -> None:
    table = _table("service", "PostgreSQL connections")
    services = _compose_services()
    ours = {name for name, s in services.items() if s.get("image", "").startswith("driftless")}
    assert {_name(row) for row in table} >= ours
    for row in table:
        name = _name(row)
        if name not in ours:
            continue  # PostgreSQL and Redis themselves
        service = services[str(name)]
        pool, overflow = _process_ceiling(service["command"], service["environment"])
        replicas = int(service.get("deploy", {}).get("replicas", 1))
        expected = replicas * _processes(service["command"]) * (pool + overflow)
        assert _numbers(row["PostgreSQL connections"]) == [expected], name
    summed, stated = _total(table, "PostgreSQL connections")
    assert summed == stated
    assert stated <= POSTGRES_DEFAULT_CONNECTIONS


def test_the_kubernetes_sum_is_what_its_workloads_may_hold_at_their_maxima_43() -> None:
    table = _table("process", "pool + overflow")
    workloads = {_kubernetes_name(w): w for w in _workloads()}
    assert {_name(row) for row in table} - {None} == set(workloads)
    for row in table:
        name = _name(row)
        if name is None:
            continue
        workload = workloads[name]
        (container,) = _containers(workload)
        command = container["command"]
        pool, overflow = _process_ceiling(command, _env(container))
        processes = _kubernetes_maximum(workload) * _processes(command)
        assert _numbers(row["processes"]) == [processes], name
        assert _numbers(row["pool + overflow"]) == [pool, overflow], name
        assert _numbers(row["connections"]) == [processes * (pool + overflow)], name
    summed, stated = _total(table, "connections")
    assert summed == stated
