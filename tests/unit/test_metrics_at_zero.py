"""Counters with known label values export every series at 0 before their first event, so
a dashboard panel shows 0, not "No data", and `increase()` sees the first event."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import get_args, get_type_hints

import pytest

from shared.curation.rules import Actor
from shared.infra import metrics
from shared.infra.metrics_export import multiprocess_registry
from shared.infra.queue import TASK_ROUTES
from shared.triggers.service import EvaluateStatus, Fired
from web.schemas.triggers import EvaluateIn
from worker import metrics as worker_metrics


@pytest.fixture(scope="module")
def fresh_worker_scrape(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, list[dict[str, str]]]:
    """What a worker that has run nothing yet exports: a fresh process imports its metrics
    in multiprocess mode, as `celery worker` does, and its files are summed as the exporter
    sums them. Name -> the label sets of its samples, each checked to be 0."""
    directory = tmp_path_factory.mktemp("metrics")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    subprocess.run([sys.executable, "-c", "import worker.metrics"], env=env, check=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
        families = list(multiprocess_registry().collect())
    samples: dict[str, list[dict[str, str]]] = {}
    for family in families:
        for sample in family.samples:
            assert sample.value == 0, sample
            samples.setdefault(sample.name, []).append(sample.labels)
    return samples


def _ordered(label_sets: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    return sorted(label_sets, key=lambda labels: sorted(labels.items()))


@pytest.mark.parametrize(
    ("name", "labels", "combinations"),
    [
        ("driftless_debounce_fires_total", ("status",), [("fire",), ("wait",), ("stale",)]),
        (
            "driftless_debounce_triggers_total",
            ("trigger", "outcome"),
            list(
                itertools.product(
                    ["navigation", "visibility", "disconnect", "manual", "sweep"],
                    ["scheduled", "coalesced", "suppressed", "dropped"],
                )
            ),
        ),
        (
            "driftless_memory_changes_total",
            ("change", "actor"),
            list(
                itertools.product(
                    ["promoted", "demoted", "deprecated", "undeprecated"],
                    ["user", "agent", "summarizer"],
                )
            ),
        ),
        (
            "driftless_fallbacks_total",
            ("call", "reason"),
            [
                ("summarize", "llm_error"),
                ("summarize", "unusable_answer"),
                ("detect_drift", "llm_error"),
            ],
        ),
        (
            "driftless_reevaluation_topics_total",
            ("outcome",),
            [("enqueued",), ("done",), ("failed",)],
        ),
        (
            "driftless_webhook_deliveries_total",
            ("status",),
            [("delivered",), ("failed",), ("dead",)],
        ),
        (
            "driftless_query_embeddings_total",
            ("result",),
            [("cached",), ("embedded",), ("failed",), ("timeout",), ("invalid",)],
        ),
        (
            "driftless_reconcile_recovered_total",
            ("kind",),
            [
                ("summaries",),
                ("evaluations",),
                ("memory_caches",),
                ("message_vectors",),
                ("topic_vectors",),
                ("tickets",),
            ],
        ),
        (
            "driftless_embeddings_total",
            ("kind", "result"),
            list(
                itertools.product(["message", "topic"], ["stored", "failed", "invalid", "deferred"])
            ),
        ),
        ("driftless_jobs_succeeded_total", ("task",), [(task,) for task in TASK_ROUTES]),
        ("driftless_jobs_failed_total", ("task",), [(task,) for task in TASK_ROUTES]),
        ("driftless_jobs_retried_total", ("task",), [(task,) for task in TASK_ROUTES]),
    ],
)
def test_every_known_series_is_at_zero_before_any_event(
    fresh_worker_scrape: dict[str, list[dict[str, str]]],
    name: str,
    labels: tuple[str, ...],
    combinations: list[tuple[str, ...]],
) -> None:
    expected = [dict(zip(labels, values, strict=True)) for values in combinations]
    assert _ordered(fresh_worker_scrape.get(name, [])) == _ordered(expected)


def test_open_ended_labels_are_not_made_up(
    fresh_worker_scrape: dict[str, list[dict[str, str]]],
) -> None:
    # Models are whatever the system meets: no series until one is met.
    assert "driftless_llm_calls_total" not in fresh_worker_scrape


def test_the_tables_hold_every_value_the_code_counts() -> None:
    assert get_args(EvaluateStatus) == metrics.DEBOUNCE_OUTCOMES
    sent_by_clients = get_args(get_type_hints(EvaluateIn)["trigger"])
    assert set(metrics.DEBOUNCED_TRIGGERS) == {*sent_by_clients, "sweep"}
    assert get_args(Actor) == metrics.MEMORY_ACTORS
    assert get_args(get_type_hints(Fired)["status"]) == worker_metrics.FIRE_STATUSES


def test_a_single_process_scrape_shows_them_too() -> None:
    # Without multiprocess mode (a single-process web, a test): the default registry.
    script = (
        "import worker.metrics, prometheus_client;"
        "print(prometheus_client.generate_latest().decode())"
    )
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    ).stdout
    for status in ("fire", "wait", "stale"):
        assert f'driftless_debounce_fires_total{{status="{status}"}} 0.0' in out
