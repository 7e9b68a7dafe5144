"""`driftless reevaluate`: starts a campaign of the matching topics and follows it with a
progress bar to its end, while a real worker and beat's ticks do the work; Ctrl-C stops
following and leaves the campaign running; a bad rate, org or time starts nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from shared.auth.service import create_api_key
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from tests.integration.reevaluations.system import System, campaign_system
from tests.integration.reevaluations.world import campaign_rows, topics_of
from tests.llm_server import FakeOpenAI
from worker.cli import main


@pytest.fixture
def system(settings: Settings, fake_openai: FakeOpenAI) -> Iterator[System]:
    with campaign_system(settings, fake_openai) as built:
        yield built


@pytest.fixture
def org(system: System) -> tuple[str, dict[str, str]]:
    """A named org (the CLI's --org) and its key."""
    name = f"reeval-{uuid.uuid4().hex[:8]}"
    with UnitOfWork(system.factory, RecordingQueue()) as uow:
        key = create_api_key(uow=uow, org_name=name)
        uow.commit()
    return name, {"Authorization": f"Bearer {key}"}


def cli_env(system: System) -> dict[str, str]:
    settings = system.settings
    assert settings.database_url and settings.redis_url
    return {"DATABASE_URL": settings.database_url, "REDIS_URL": settings.redis_url}


@pytest.fixture
def beat(system: System) -> Iterator[None]:
    """Beat's tick, sent every 0.2 s until the test ends."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.2):
            system.tick()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=5)


def test_reevaluate_starts_a_campaign_and_follows_it_to_the_end(
    system: System, org: tuple[str, dict[str, str]], beat: None
) -> None:
    name, auth = org
    with system.worker():
        ada = topics_of(system.client, auth, closed=2, active=False, user="ada")
        topics_of(system.client, auth, closed=1, active=False, user="bob")
        system.until_summarized(ada)
        result = CliRunner().invoke(
            main, ["reevaluate", "--org", name, "--user", "ada", "--rate", "1000"],
            env=cli_env(system),
        )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "2 topics at 1000 a second" in result.stderr
    assert "re-evaluating" in result.stderr  # the progress bar
    [line] = result.stdout.strip().splitlines()
    campaign_id = line.split()[1]
    assert line == f"re-evaluation {campaign_id} finished: 2 done, 0 failed of 2"
    shown = system.campaign(auth, campaign_id)  # the org's own campaign
    assert (shown["state"], shown["userId"], shown["rate"]) == ("finished", "ada", 1000.0)


def test_ctrl_c_stops_following_and_leaves_the_campaign_running(
    system: System, org: tuple[str, dict[str, str]]
) -> None:
    name, auth = org
    topics_of(system.client, auth, closed=1, active=False)
    driftless = Path(sys.executable).parent / "driftless"
    follow = subprocess.Popen(
        [str(driftless), "reevaluate", "--org", name],
        env={"PATH": str(driftless.parent), "LOG_FORMAT": "text", **cli_env(system)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stderr is not None
        started = follow.stderr.readline()  # "re-evaluation <id>: 1 topics at 5 a second"
        assert started.startswith("re-evaluation "), started
        campaign_id = started.split()[1].rstrip(":")
        follow.send_signal(signal.SIGINT)  # no beat runs: it would follow for ever
        out, err = follow.communicate(timeout=30)
    finally:
        follow.kill()

    assert follow.returncode == 130
    assert f"re-evaluation {campaign_id} keeps running" in err
    assert out == ""
    assert system.campaign(auth, campaign_id)["state"] == "running"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--rate", "0"], "rate: must be 0.1 to 1000 topics a second"),
        (["--rate", "5000"], "rate: must be 0.1 to 1000 topics a second"),
        (["--user", " "], "userId: must be 1 to 200 characters"),
        (["--org", "no-such-org"], "no org named 'no-such-org'"),
        (["--since", "yesterday"], "'yesterday' is not an ISO-8601 time"),
    ],
)
def test_a_bad_rate_filter_or_org_starts_nothing(
    system: System, arguments: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["reevaluate", *arguments], env=cli_env(system))

    assert result.exit_code != 0
    assert message in result.output
    assert campaign_rows(system.factory) == 0


def test_without_an_offset_since_is_utc(system: System, org: tuple[str, dict[str, str]]) -> None:
    name, _ = org
    result = CliRunner().invoke(
        main, ["reevaluate", "--org", name, "--since", "2999-01-01T00:00:00"], env=cli_env(system)
    )
    assert result.exit_code == 0, result.output  # nothing that new: finished at once
    with UnitOfWork(system.factory, RecordingQueue()) as uow:
        since = uow.session.execute(text("SELECT since FROM reevaluation_campaigns")).scalar_one()
    assert since.isoformat() == "2999-01-01T00:00:00+00:00"
