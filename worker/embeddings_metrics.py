"""The embeddings' lag (shared/embeddings/sweep.py), read from Redis at scrape time."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import redis
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from shared.embeddings.sweep import Cursors

log = logging.getLogger(__name__)

EMBEDDINGS_LAG = "driftless_embeddings_lag_seconds"


class EmbeddingsLagCollector(Collector):
    """How long the oldest message without a vector has waited (0: none), as beat's last
    tick found it; the age grows between scrapes even if the ticks stop. Every worker
    reports the same number (take the max); 0 while embeddings are off."""

    def __init__(self, oldest: Callable[[], float | None]) -> None:
        self._oldest = oldest
        self._failing = False

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        try:
            oldest = self._oldest()
        except redis.RedisError as exc:
            if not self._failing:
                log.warning("embeddings lag unavailable: %s", exc)
            self._failing = True
            return []
        self._failing = False
        gauge = self._family()
        gauge.add_metric([], 0.0 if oldest is None else max(0.0, time.time() - oldest))
        return [gauge]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            EMBEDDINGS_LAG, "Age of the oldest message without a vector (0: every one has its)"
        )


def embeddings_lag_collector(client: redis.Redis, model: str) -> EmbeddingsLagCollector:
    return EmbeddingsLagCollector(Cursors(client, model).oldest)
