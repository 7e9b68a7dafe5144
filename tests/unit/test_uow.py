"""The unit of work sends jobs only after a commit, and a lost send never undoes the commit."""

from __future__ import annotations

from typing import Any

import pytest

from shared.infra.db.engine import sqlalchemy_url
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import Job, RecordingQueue


class FakeSession:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def commit(self) -> None:
        self.log.append("commit")

    def close(self) -> None:
        self.log.append("close")


class LoggingQueue(RecordingQueue):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def send(self, job: Job) -> None:
        self.log.append(f"send {job.task}")
        super().send(job)


class BrokenQueue:
    def send(self, job: Job) -> None:
        raise ConnectionError("broker down")


def make_uow(queue: Any, log: list[str]) -> UnitOfWork:
    return UnitOfWork(lambda: FakeSession(log), queue)  # type: ignore[arg-type]


def test_jobs_are_sent_after_the_commit() -> None:
    log: list[str] = []
    with make_uow(LoggingQueue(log), log) as uow:
        uow.enqueue(Job("a"))
        uow.enqueue(Job("b"))
        assert log == []
        uow.commit()
    assert log == ["commit", "send a", "send b", "close"]


def test_a_unit_of_work_left_without_commit_sends_nothing() -> None:
    log: list[str] = []
    queue = LoggingQueue(log)
    with pytest.raises(RuntimeError), make_uow(queue, log) as uow:
        uow.enqueue(Job("a"))
        raise RuntimeError("the service failed")
    assert queue.sent == []
    assert log == ["close"]


def test_a_failed_send_after_commit_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []
    with make_uow(BrokenQueue(), log) as uow:
        uow.enqueue(Job("driftless.summarize_topic", {"topic_id": "t"}))
        uow.commit()
    assert log == ["commit", "close"]
    assert "reconciler" in caplog.text


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("postgres://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
    ],
)
def test_database_urls_use_psycopg2(given: str, expected: str) -> None:
    assert sqlalchemy_url(given) == expected
