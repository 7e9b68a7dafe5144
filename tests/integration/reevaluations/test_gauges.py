"""The worker's re-evaluation gauges, read from PostgreSQL at scrape time: running
campaigns and their topics not settled yet; none at all while the database is away."""

from __future__ import annotations

from tests.integration.reevaluations.system import System
from tests.integration.reevaluations.world import start, topics_of
from worker.metrics import reevaluation_collector


def gauges(database_url: str) -> dict[str, float]:
    return {
        family.name: sample.value
        for family in reevaluation_collector(database_url).collect()
        for sample in family.samples
    }


def test_the_gauges_count_running_campaigns_and_their_unsettled_topics(system: System) -> None:
    assert system.settings.database_url is not None
    auth = system.new_org()
    topics_of(system.client, auth, closed=3, active=False)
    assert gauges(system.settings.database_url) == {
        "driftless_reevaluations_running": 0,
        "driftless_reevaluation_topics_pending": 0,
    }

    start(system.client, auth)
    start(system.client, auth, {"userId": "bob"})  # nothing matches: finished at once
    cancelled = start(system.client, auth)
    system.client.delete(f"/agents-api/reevaluations/{cancelled['id']}", headers=auth)

    assert gauges(system.settings.database_url) == {
        "driftless_reevaluations_running": 1,
        "driftless_reevaluation_topics_pending": 3,
    }


def test_no_gauge_rather_than_a_wrong_one_while_the_database_is_away() -> None:
    assert gauges("postgresql://nobody@127.0.0.1:1/none") == {}
