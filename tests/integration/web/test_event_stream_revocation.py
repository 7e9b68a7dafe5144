"""A revoked key loses its open event streams at the next ping, not at DRIFTLESS_STREAM_MAX_S
(web/views/live.py re-checks the stream's key at each ping)."""

from __future__ import annotations

import time

import pytest
import redis
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import revoke_key
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.live_streams import streams_key
from shared.infra.queue import FIRE_DEBOUNCE, RecordingQueue
from tests.conftest import new_key
from tests.helpers import new_session
from tests.integration.web.test_event_streams import Streams, _client, _org
from web.views import live

PING_S = 0.2
REVOKED = 'event: end\ndata: {"reason": "revoked"}\n\n'


def _revoke(factory: sessionmaker[Session], key: str) -> None:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        revoke_key(uow=uow, prefix=key[:10])
        uow.commit()


def test_a_revoked_keys_open_stream_ends_at_the_next_ping_with_reason_revoked(
    settings: Settings, committed_factory: sessionmaker[Session], queue: RecordingQueue,
    redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # Committed keys: the stream's thread looks its key up on a connection of its own.
    monkeypatch.setattr(live, "PING_S", PING_S)
    # The default auth cache (5 s) is far longer than the ping: it must not hide the
    # revocation from the stream.
    client = _client(settings, committed_factory, queue, stream_idle_s=300)
    key, other_key = new_key(committed_factory), new_key(committed_factory)
    auth = {"Authorization": f"Bearer {key}"}
    other_auth = {"Authorization": f"Bearer {other_key}"}
    sid, other_sid = new_session(client, auth)["id"], new_session(client, other_auth)["id"]
    streams = Streams(client)
    stream, other = streams.open_one(auth, sid), streams.open_one(other_auth, other_sid)
    orgs = [_org(committed_factory, auth), _org(committed_factory, other_auth)]
    try:
        assert stream.next() == ": ping\n\n"  # a ping re-checked the key: still live
        _revoke(committed_factory, key)
        revoked_at = time.monotonic()
        chunks: list[str] = []
        while time.monotonic() - revoked_at < 3.0 and chunks[-1:] != [REVOKED]:
            chunks.append(stream.next())
        ended_s = time.monotonic() - revoked_at
        assert chunks[-1] == REVOKED, chunks
        with pytest.raises(StopIteration):  # the server ended the response after it
            stream.next()
        # Within about a ping: the key cache did not keep the key alive for its 5 s.
        assert ended_s < 4 * PING_S, ended_s
        assert other.next() == ": ping\n\n"  # another key's stream goes on
    finally:
        streams.close_all()
    # The server ended it: not the user leaving, so no disconnect trigger; slot given back.
    assert [job.kwargs["trigger"] for job in queue.sent if job.task == FIRE_DEBOUNCE] == [
        "disconnect"  # the other stream, closed by its client above
    ]
    with redis.Redis.from_url(redis_url) as leases:
        assert [leases.zcard(streams_key(org)) for org in orgs] == [0, 0]
    # What the stream learnt, the process's requests know too: no 5 s of grace left.
    assert client.get(f"/agents-api/sessions/{sid}/events", headers=auth).status_code == 401
