"""The gauges of fair share (shared/infra/fair.py), read from Redis at scrape time."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from shared.infra.fair import LANES, FairQueue

log = logging.getLogger(__name__)

FAIR_ORGS_WAITING = "driftless_fair_orgs_waiting"
FAIR_OLDEST_WAIT = "driftless_fair_oldest_wait_seconds"


class FairQueueCollector(Collector):
    """Orgs with model jobs waiting, and the oldest job's wait, per lane, read at scrape
    time (one bounded round trip a lane). No org label: the orgs are unbounded."""

    def __init__(self, fair: FairQueue) -> None:
        self._fair = fair
        self._failing = False

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        orgs, oldest = self._families()
        try:
            for lane in LANES:
                waiting = self._fair.waiting(lane)
                orgs.add_metric([lane], float(waiting.orgs))
                oldest.add_metric([lane], waiting.oldest_s)
        except redis.RedisError as exc:
            if not self._failing:
                log.warning("fair queue gauges unavailable: %s", exc)
            self._failing = True
            return []
        self._failing = False
        return [orgs, oldest]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                FAIR_ORGS_WAITING, "Orgs with model jobs waiting their turn", labels=["lane"]
            ),
            GaugeMetricFamily(
                FAIR_OLDEST_WAIT,
                "How long the oldest waiting model job has waited (0: none waits)",
                labels=["lane"],
            ),
        )
