"""The whole system behind PgBouncer in transaction mode (issue 7, "Connection budget").

The test starts its own PgBouncer (pool_mode = transaction, a server pool of
SERVER_POOL connections) in front of a database of its own, then runs the real thing
through it: the migrations, the web API under concurrent requests (more app threads
than server connections), and a summary made by a real Celery worker. PostgreSQL is
sampled all along: it never sees more than SERVER_POOL connections to that database.

Transaction pooling hands a server connection to a client for one transaction only,
so anything kept on a session between transactions would break: session advisory
locks, SET without LOCAL, LISTEN/NOTIFY, server-side prepared statements, WITH HOLD
cursors, temporary tables. The code uses none of them (psycopg2 binds parameters on
the client), which is what this test holds it to.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from shared.infra.config import Settings
from shared.infra.db.migrate import alembic_config, upgrade
from tests import services
from tests.conftest import new_key
from tests.helpers import new_session, post_message, wait_for
from tests.llm_server import FakeOpenAI
from tests.worker_thread import worker_thread

SERVER_POOL = 4  # PgBouncer's default_pool_size: server connections per database+user
APP_THREADS = 16  # concurrent requests, each holding a client connection
GOOD = {
    "title": "Billing stack",
    "summary": "PostgreSQL, Celery; Friday.",
    "include_in_memory": True,
}


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Bouncer:
    url: str  # the application's database URL, through PgBouncer
    direct_url: str  # the same database, straight to PostgreSQL
    database: str


def write_config(tmp_path: Path, *, direct_url: str, port: int) -> Path:
    server = make_url(direct_url)
    target = f"host={server.host or '127.0.0.1'} port={server.port or 5432}"
    target += f" dbname={server.database} user={server.username or 'postgres'}"
    if server.password:
        target += f" password={server.password}"
    users = tmp_path / "users.txt"
    users.write_text(f'"{server.username or "postgres"}" ""\n')
    ini = tmp_path / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"driftless = {target}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {users}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {SERVER_POOL}\n"
        "reserve_pool_size = 0\n"
        "max_client_conn = 500\n"
        # The same guard as the application's pool_timeout: waiting is an error, not a hang.
        "query_wait_timeout = 30\n"
    )
    return ini


@pytest.fixture(scope="module")
def bouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bouncer]:
    binary = pgbouncer_binary()
    if binary is None:
        pytest.skip("the pgbouncer binary is not installed (Debian: apt-get install pgbouncer)")
    command = [binary]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no `postgres` user for PgBouncer to be")
        command += ["-u", "postgres"]
    database = f"{services.TEST_DATABASE}_pgbouncer"
    direct_url = services.recreate_database(services.admin_database_url(), database)
    tmp_path = tmp_path_factory.mktemp("pgbouncer")
    port = free_port()
    ini = write_config(tmp_path, direct_url=direct_url, port=port)
    url = make_url(direct_url).set(host="127.0.0.1", port=port, database="driftless")
    bouncer_url = url.render_as_string(hide_password=False)
    log_path = tmp_path / "pgbouncer.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([*command, str(ini)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _answers(bouncer_url), timeout=15, what="PgBouncer to accept")
        yield Bouncer(url=bouncer_url, direct_url=direct_url, database=database)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.returncode not in (0, -15):
            print(log_path.read_text())


def _answers(url: str) -> bool:
    try:
        psycopg2.connect(url, connect_timeout=1).close()
        return True
    except psycopg2.OperationalError:
        return False


class ServerConnections:
    """Samples how many connections PostgreSQL holds to the database, in a thread."""

    def __init__(self, admin_url: str, database: str) -> None:
        self._admin_url, self._database = admin_url, database
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.peak = 0
        self.samples = 0

    def __enter__(self) -> ServerConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        connection = psycopg2.connect(self._admin_url)
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                while not self._stop.is_set():
                    cursor.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                        (self._database,),
                    )
                    row = cursor.fetchone()
                    self.peak = max(self.peak, int(row[0]) if row else 0)
                    self.samples += 1
                    self._stop.wait(0.005)
        finally:
            connection.close()


@pytest.fixture(scope="module")
def migrated(bouncer: Bouncer) -> Bouncer:
    upgrade(bouncer.url)  # Alembic's DDL runs in one transaction: fine in transaction mode
    return bouncer


def test_migrations_run_through_pgbouncer(migrated: Bouncer) -> None:
    head = ScriptDirectory.from_config(alembic_config(migrated.direct_url)).get_current_head()
    with psycopg2.connect(migrated.direct_url) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT version_num FROM alembic_version")
        assert cursor.fetchall() == [(head,)]


@pytest.fixture
def bouncer_settings(
    migrated: Bouncer, redis_url: str, broker_url: str, fake_openai: FakeOpenAI
) -> Settings:
    return Settings(
        database_url=migrated.url,
        redis_url=redis_url,
        broker_url=broker_url,
        llm="openai",
        openai_base_url=fake_openai.base_url,
        llm_model="test-model",
        llm_rpm=600,  # the worker's provider also goes through the fleet-wide bucket
        db_pool_size=APP_THREADS,  # more client connections than PgBouncer has servers
        db_max_overflow=0,
    )


def test_concurrent_api_requests_share_a_few_server_connections(
    migrated: Bouncer, bouncer_settings: Settings
) -> None:
    from shared.infra.queue import RecordingQueue
    from web.app import create_app

    app = create_app(bouncer_settings, queue=RecordingQueue())
    runtime = app.extensions["driftless"]
    auth = {"Authorization": f"Bearer {new_key(runtime.session_factory)}"}
    client = app.test_client()
    sessions = [new_session(client, auth, agent="planner", user=f"u{i}") for i in range(4)]
    per_thread = 5
    errors: list[BaseException] = []
    start = threading.Barrier(APP_THREADS)

    def post(number: int) -> None:
        own = app.test_client()  # one per thread, as gunicorn's threads each serve one
        session = sessions[number % len(sessions)]
        try:
            start.wait()
            for i in range(per_thread):
                post_message(own, auth, session["id"], f"thread {number} message {i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=post, args=(n,)) for n in range(APP_THREADS)]
    with ServerConnections(services.admin_database_url(), migrated.database) as server:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert errors == []
    # Every message landed, each session's in its one active topic (R4 under pooling).
    for session in sessions:
        listed: Any = client.get(
            f"/agents-api/sessions/{session['id']}/messages?limit=200", headers=auth
        ).json
        contents = {m["content"] for m in listed["messages"]}
        expected = {
            f"thread {n} message {i}"
            for n in range(APP_THREADS)
            if n % len(sessions) == sessions.index(session)
            for i in range(per_thread)
        }
        assert contents == expected
        assert {m["topicId"] for m in listed["messages"]} == {session["activeTopicId"]}
    assert server.samples > 0
    # The app held more connections at once than PostgreSQL ever saw: PgBouncer lent each
    # of them a server connection for one transaction at a time.
    assert runtime.engine.pool.checkedin() > SERVER_POOL
    assert 1 <= server.peak <= SERVER_POOL
    runtime.engine.dispose()


def test_a_worker_behind_pgbouncer_summarizes_and_promotes(
    migrated: Bouncer, bouncer_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    import worker.tasks  # noqa: F401  (registers the shared tasks before the app finalizes)
    from shared.infra.queue import CeleryJobQueue
    from web.app import create_app
    from worker.app import make_celery
    from worker.context import context_of

    fake_openai.answer_json(GOOD)
    celery_app = make_celery(bouncer_settings)
    # Queues of its own on the shared broker: no other test's worker takes these jobs.
    celery_app.conf.broker_transport_options = {
        **celery_app.conf.broker_transport_options,
        "global_keyprefix": f"pgbouncer-{uuid.uuid4().hex[:8]}:",
    }
    app = create_app(bouncer_settings, queue=CeleryJobQueue(celery_app))
    auth = {"Authorization": f"Bearer {new_key(app.extensions['driftless'].session_factory)}"}
    client = app.test_client()
    with (
        ServerConnections(services.admin_database_url(), migrated.database) as server,
        worker_thread(celery_app),
    ):
        session = new_session(client, auth, agent="planner", user="ada")
        for i in range(6):
            role = "user" if i % 2 == 0 else "assistant"
            post_message(client, auth, session["id"], f"Billing decision {i}", role=role)
        topic_id = session["activeTopicId"]
        response = client.post(f"/agents-api/sessions/{session['id']}/topics", headers=auth)
        assert response.status_code == 201

        def summarized() -> Any:
            topic: Any = client.get(f"/agents-api/topics/{topic_id}", headers=auth).json
            return topic if topic["summarizedAt"] else None

        topic = wait_for(summarized, what="the worker to summarize through PgBouncer")
        memory: Any = client.get("/agents-api/memory?agentId=planner&userId=ada", headers=auth).json
    assert topic["summary"] == GOOD["summary"] and topic["summarySource"] == "llm"
    assert topic["keepInMemory"] is True  # six messages and a JSON `true`: promoted
    assert [e["topicId"] for e in memory["entries"]] == [topic_id]
    evaluations: Any = client.get(f"/agents-api/topics/{topic_id}/evaluations", headers=auth).json
    assert [e["outcome"] for e in evaluations["evaluations"]] == ["refresh"]
    assert fake_openai.calls == 1
    # The worker sized its engine for its 4 threads, and used it through PgBouncer.
    context = context_of(celery_app)
    assert context.tasks_per_process == 4
    assert context.engine.url.port == make_url(migrated.url).port
    assert 1 <= server.peak <= SERVER_POOL
    context.engine.dispose()
    app.extensions["driftless"].engine.dispose()


def test_the_webs_idle_transaction_bound_holds_through_pgbouncer_41(
    bouncer_settings: Settings,
) -> None:
    # PgBouncer refuses startup options: the bound travels as a SET LOCAL in front of the
    # transaction's first statement, as the statement timeout does, and holds there too.
    from tests.integration.portability.test_client_waits import assert_idle_transactions_end

    assert_idle_transactions_end(bouncer_settings)
