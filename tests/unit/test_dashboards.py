"""deploy/grafana and deploy/prometheus, statically: the dashboard is a Grafana dashboard
on a datasource variable, every alert is actionable, the rules select the scrape jobs of
the example config, and promtool accepts the rules, the config and every dashboard query.

That every metric they name is really exported is checked against a running system in
tests/integration/operations/test_dashboard_metrics.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from shared.infra import tracing
from shared.infra.queue import ENQUEUE_SPAN, TASK_ROUTES
from tests.dashboards import (
    ALERTS,
    DASHBOARD,
    PROMETHEUS,
    dashboard_expressions,
    load_dashboard,
    load_rules,
    metric_names,
    panels,
    rule_expressions,
)
from worker.fair import MODEL_JOB_SPAN

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEVERITIES = {"warning", "critical"}
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus)"
)


def _alerts() -> list[dict[str, Any]]:
    return [rule for group in load_rules()["groups"] for rule in group["rules"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


# --- the dashboard ----------------------------------------------------------------------


def test_the_dashboard_queries_a_datasource_variable_never_a_fixed_datasource() -> None:
    dashboard = load_dashboard()
    assert dashboard["schemaVersion"] >= 39
    [variable] = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    queried = [panel for panel in panels(dashboard) if panel["type"] != "row"]
    assert len(queried) >= 20
    for panel in queried:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip() and target["refId"], panel["title"]
    # The only other uid is Grafana's own annotation source.
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', DASHBOARD.read_text()))
    assert uids == {"${datasource}", "-- Grafana --", dashboard["uid"]}


def test_the_dashboards_panels_have_unique_ids_and_do_not_overlap() -> None:
    every = panels(load_dashboard())
    ids = [panel["id"] for panel in every]
    assert len(ids) == len(set(ids))
    taken: dict[tuple[int, int], str] = {}
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, (panel["title"], taken.get((x, y)))
                taken[(x, y)] = panel["title"]


def test_the_dashboard_has_a_row_for_webhooks_and_one_for_reevaluation_campaigns() -> None:
    rows = {panel["title"] for panel in panels(load_dashboard()) if panel["type"] == "row"}
    assert {"Webhook deliveries", "Re-evaluation campaigns"} <= rows


# --- links to traces ----------------------------------------------------------------------

JAEGER_SEARCH = "${jaeger_url}/search?"
# What a link may search on: our processes, the spans named in docs/contract.md
# ("Traces"), and the attributes they carry (`error`: Jaeger's tag for an error status).
TRACED_SERVICES = {tracing.SERVICE_WEB, tracing.SERVICE_WORKER, tracing.SERVICE_BEAT}
SPAN_NAMES = {MODEL_JOB_SPAN, ENQUEUE_SPAN, *(f"run/{task}" for task in TASK_ROUTES)}
SPAN_TAGS = {tracing.ORG_ID, "driftless.job.lane", "gen_ai.operation.name", "error"}


def _trace_links(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, url) of every link: the dashboard's, each panel's and its series' data links."""
    found = [("dashboard", str(link["url"])) for link in dashboard.get("links", [])]
    for panel in panels(dashboard):
        data_links = panel.get("fieldConfig", {}).get("defaults", {}).get("links", [])
        found += [(panel["title"], str(link["url"])) for link in panel.get("links", [])]
        found += [(panel["title"], str(link["url"])) for link in data_links]
    return found


def test_44_panels_link_to_jaeger_searches_through_a_variable() -> None:
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    jaeger = variables["jaeger_url"]
    assert jaeger["type"] in {"textbox", "constant"}
    assert jaeger["query"] == jaeger["current"]["value"] == "http://localhost:16686"
    searches = []
    for where, url in _trace_links(dashboard):
        assert url.startswith(JAEGER_SEARCH), (where, url)
        # Every variable a link names is the dashboard's, or one of Grafana's own.
        for name in re.findall(r"\$\{(\w+)", url):
            assert name in variables or name.startswith("__"), (where, name)
        query = {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}
        assert query["service"] in TRACED_SERVICES, where
        assert query.get("operation", MODEL_JOB_SPAN) in SPAN_NAMES, (where, query)
        tags = json.loads(query.get("tags", "{}"))
        assert set(tags) <= SPAN_TAGS, (where, tags)
        # The dashboard's time range, in the microseconds Jaeger takes.
        assert (query["start"], query["end"]) == ("${__from}000", "${__to}000"), where
        searches.append((query["service"], query.get("operation"), tags))
    assert (tracing.SERVICE_WEB, None, {}) in searches
    assert (tracing.SERVICE_WORKER, MODEL_JOB_SPAN, {}) in searches
    assert any(tags.get(tracing.ORG_ID, "").startswith("${org_id") for _, _, tags in searches)


def test_44_a_panel_with_trace_links_says_they_are_searches_not_its_traces() -> None:
    linked = [panel for panel in panels(load_dashboard()) if panel.get("links")]
    assert len(linked) >= 5
    for panel in linked:
        assert "no exemplars" in panel["description"], panel["title"]


# --- the alert rules -----------------------------------------------------------------


def test_every_alert_waits_and_says_how_bad_what_and_why() -> None:
    alerts = _alerts()
    assert {rule["alert"] for rule in alerts} >= {
        "DriftlessQueueLagHigh", "DriftlessLLMFallbackRatioHigh",
        "DriftlessReconcilerKeepsRecovering", "DriftlessReconcilerResending",
        "DriftlessWorkersDown", "DriftlessJobFailures",
        "DriftlessEmbeddingsLagHigh",
    }  # fmt: skip
    for rule in alerts:
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def test_every_job_the_rules_and_the_dashboard_select_is_scraped_by_the_example_config() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    jobs = {scrape["job_name"] for scrape in config["scrape_configs"]}
    assert jobs == {"driftless-web", "driftless-worker"}
    assert config["rule_files"] == [ALERTS.name]
    selected: set[str] = set()
    for _, expr in rule_expressions() + dashboard_expressions():
        for matcher in re.findall(r'job(=~|=)"([^"]*)"', expr):
            operator, value = matcher
            selected.update(value.split("|") if operator == "=~" else [value])
    assert selected == jobs


# --- promtool ----------------------------------------------------------------------------


@needs_promtool
def test_promtool_accepts_the_alert_rules_and_the_scrape_config() -> None:
    rules = _promtool("check", "rules", str(ALERTS))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = _promtool("check", "config", str(PROMETHEUS))
    assert config.returncode == 0, config.stdout + config.stderr


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each panel's PromQL as a recording rule, so promtool parses it as Prometheus would."""
    rules = [
        {"record": f"driftless_dashboard:query_{index}", "expr": expr}
        for index, (_, expr) in enumerate(dashboard_expressions())
    ]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = _promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # A broken query does fail it: the check is not vacuous.
    path.write_text(
        yaml.safe_dump(
            {"groups": [{"name": "dashboard", "rules": [{"record": "x:y", "expr": "rate(up[5m]"}]}]}
        )
    )
    assert _promtool("check", "rules", str(path)).returncode != 0


@needs_promtool
def test_the_reconciler_alert_fires_on_steady_losses_not_on_one_burst_42b(tmp_path: Path) -> None:
    """Four summaries a minute resent, every minute, fire it; one Redis restart's 1,000
    resent over two runs and nothing after do not."""
    [rule] = [r for r in _alerts() if r["alert"] == "DriftlessReconcilerResending"]
    annotations = {
        "summary": "The reconciler keeps resending lost summaries (20 in 5 minutes)",
        "description": rule["annotations"]["description"],
    }
    tests = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": 'driftless_reconcile_recovered_total{kind="summaries"}',
                        "values": "0+4x40",
                    },
                    {
                        "series": 'driftless_reconcile_recovered_total{kind="evaluations"}',
                        "values": "0 500 1000 1000x38",
                    },
                ],
                "alert_rule_test": [
                    # Both still pending: a burst, or the first minutes of a loss.
                    {"eval_time": "8m", "alertname": "DriftlessReconcilerResending"},
                    {
                        "eval_time": "30m",
                        "alertname": "DriftlessReconcilerResending",
                        "exp_alerts": [
                            {
                                "exp_labels": {"kind": "summaries", "severity": "warning"},
                                "exp_annotations": annotations,
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "reconciler-alert-test.yml"
    path.write_text(yaml.safe_dump(tests))
    result = _promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# --- reading metric names out of PromQL ---------------------------------------------------


def test_metric_names_leave_out_functions_keywords_labels_and_strings() -> None:
    expr = (
        'sum by (call) (rate(driftless_fallbacks_total{reason=~"llm_.*"}[$__rate_interval]))'
        " / on (call) group_left label_replace(sum without (model) (rate("
        'driftless_llm_calls_total[5m] offset 1h)), "call", "$1", "purpose", "(.*)")'
        ' > 0.2 and bool 1e3 or (sum(up{job="driftless-worker"}) or vector(0)) < 1'
    )
    assert metric_names(expr) == {"driftless_fallbacks_total", "driftless_llm_calls_total", "up"}
    assert metric_names(
        "histogram_quantile(0.95, sum by (queue, le) (rate(driftless_queue_lag_second_bucket[5m])))"
    ) == {"driftless_queue_lag_second_bucket"}  # a misspelled name is still read as a name


def test_every_query_selects_at_least_one_metric() -> None:
    for title, expr in dashboard_expressions() + rule_expressions():
        assert metric_names(expr), title
