"""R27–R29 in real time: the web, the real broker, a real worker and the real Redis."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.models import Evaluation
from tests.helpers import new_session, post_message, wait_for

TRIGGERS = ("visibility", "disconnect", "navigation")


def _evaluations(factory: sessionmaker[Session], topic_id: str) -> list[Evaluation]:
    with factory() as db:
        return list(
            db.scalars(select(Evaluation).where(Evaluation.topic_id == uuid.UUID(topic_id)))
        )


def _burst(client: Any, auth: dict[str, str], sid: str, size: int) -> tuple[list[str], dt.datetime]:
    """The statuses, and when the last trigger was sent: Redis received it no earlier, so
    the debounce cannot have ended before that moment + the debounce. (A clock read after
    the answer overstated it on a loaded machine, by 0.27 s once.)"""
    statuses = []
    for i in range(size):
        last_sent_at = dt.datetime.now(dt.UTC)
        response = client.post(
            f"/agents-api/sessions/{sid}/evaluate",
            json={"trigger": TRIGGERS[i % 3]},
            headers=auth,
        )
        assert response.status_code == 202
        statuses.append(response.json["status"])
        time.sleep(0.03)
    return statuses, last_sent_at


def test_r27_bursts_of_2_5_and_20_each_run_exactly_one_evaluation(
    live_app: Any, live_auth: dict[str, str], committed_factory: sessionmaker[Session],
    settings: Any,
) -> None:  # fmt: skip
    client = live_app.test_client()
    sessions = []
    for size in (2, 5, 20):
        session = new_session(client, live_auth, user=f"burst-{size}")
        post_message(client, live_auth, session["id"], "We decided to ship on Friday.")
        sessions.append((size, session))
    results: dict[int, tuple[list[str], dt.datetime]] = {}

    def run(size: int, sid: str) -> None:
        results[size] = _burst(live_app.test_client(), live_auth, sid, size)

    threads = [threading.Thread(target=run, args=(size, s["id"])) for size, s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    for size, session in sessions:
        statuses, last_trigger = results[size]
        assert statuses == ["scheduled"] + ["coalesced"] * (size - 1)
        tid = session["activeTopicId"]
        [evaluation] = wait_for(
            lambda tid=tid: _evaluations(committed_factory, tid), what="1 evaluation"
        )
        assert evaluation.trigger == "visibility"
        delay = (evaluation.started_at - last_trigger).total_seconds()
        assert delay >= settings.debounce_ms / 1000 - 0.05, (size, delay)  # Redis TIME vs ours
    time.sleep(1.0)  # nothing else is on its way
    for _, session in sessions:
        assert len(_evaluations(committed_factory, session["activeTopicId"])) == 1


def test_r28_a_trigger_after_the_evaluation_is_suppressed_until_a_new_message(
    live_app: Any, live_auth: dict[str, str], committed_factory: sessionmaker[Session]
) -> None:
    client = live_app.test_client()
    session = new_session(client, live_auth, user="guard")
    post_message(client, live_auth, session["id"], "Remember: invoices in EUR.")
    url = f"/agents-api/sessions/{session['id']}/evaluate"
    assert (
        client.post(url, json={"trigger": "manual"}, headers=live_auth).json["status"]
        == "scheduled"
    )
    tid = session["activeTopicId"]
    wait_for(lambda: _evaluations(committed_factory, tid), what="the evaluation")

    def suppressed() -> bool:
        return (
            client.post(url, json={"trigger": "visibility"}, headers=live_auth).json["status"]
            == "suppressed"
        )

    wait_for(suppressed, what="the guard to be armed")  # armed right after the commit
    post_message(client, live_auth, session["id"], "One more thing: VAT included.")
    assert (
        client.post(url, json={"trigger": "visibility"}, headers=live_auth).json["status"]
        == "scheduled"
    )
