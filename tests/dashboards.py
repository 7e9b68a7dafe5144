"""The Grafana dashboard and the Prometheus rules in deploy/, read as data: their PromQL
expressions and the metric names those expressions select."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "driftless.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"

# Series Prometheus makes itself for every target, not exported by driftless.
STANDARD_SERIES = {"up"}
# PromQL words that are neither a metric nor followed by "(" (functions and aggregations
# are: any identifier before a parenthesis is one).
KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "atan2", "inf", "nan",
}  # fmt: skip
# Grafana's interval variables, as a duration Prometheus accepts.
GRAFANA_INTERVALS = re.compile(
    r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}"
)

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(\s*\()?")


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def load_rules() -> dict[str, Any]:
    rules: dict[str, Any] = yaml.safe_load(ALERTS.read_text())
    return rules


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' own and those folded into a collapsed row included."""
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def dashboard_expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, Grafana's interval variables as 5m."""
    return [
        (panel["title"], GRAFANA_INTERVALS.sub("5m", target["expr"]))
        for panel in panels(load_dashboard())
        for target in panel.get("targets", [])
    ]


def rule_expressions() -> list[tuple[str, str]]:
    """(alert or record name, PromQL) of every rule."""
    return [
        (rule.get("alert") or rule["record"], rule["expr"])
        for group in load_rules()["groups"]
        for rule in group["rules"]
    ]


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects: no functions, keywords, label names or values."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = _LABEL_LIST.sub("", text)  # by (...), on (...), group_left (...)
    return {
        match.group(1)
        for match in _IDENTIFIER.finditer(text)
        if not match.group(2) and match.group(1).lower() not in KEYWORDS
    }
