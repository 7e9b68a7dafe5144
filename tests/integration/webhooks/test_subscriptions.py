"""Subscriptions over HTTP: created with a secret shown once, listed without it, deleted,
scoped to the org; bad input is a 422 naming the field and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.fernet import Fernet
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.config import Settings
from shared.infra.queue import RecordingQueue
from shared.infra.sealing import SecretBox
from shared.webhooks.models import Webhook
from shared.webhooks.service import MAX_WEBHOOKS_PER_ORG
from tests.integration.webhooks.outbox import org_of
from tests.services import SEALING_KEY

URL = "http://127.0.0.1:9/hooks"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def subscribe(client: FlaskClient, auth: dict[str, str], **body: Any) -> Any:
    return client.post(
        "/agents-api/webhooks", headers=auth, json={"url": URL, "events": ["facts.changed"], **body}
    )


def count_webhooks(session_factory: sessionmaker[Session], auth: dict[str, str]) -> int:
    org_id = org_of(session_factory, auth)
    with session_factory() as session:
        count = session.scalar(select(func.count()).where(Webhook.org_id == org_id))
        return int(count or 0)


def test_a_subscription_shows_its_secret_once_and_never_again(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    created = subscribe(client, auth, events=["topic.forked", "facts.changed", "topic.forked"])

    assert created.status_code == 201, created.json
    body: Any = created.json
    assert body["secret"].startswith("whsec_")
    assert body["events"] == ["topic.forked", "facts.changed"]  # the contract's order, once
    listed: Any = client.get("/agents-api/webhooks", headers=auth).json
    assert listed["webhooks"] == [{k: v for k, v in body.items() if k != "secret"}]
    assert body["secret"] not in str(listed)


def test_a_clients_own_secret_is_kept_and_sealed_so_the_database_never_holds_it(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    created: Any = subscribe(client, auth, secret=SECRET).json

    assert created["secret"] == SECRET
    with session_factory() as session:
        sealed = session.scalar(select(Webhook.sealed_secret).where(Webhook.id == created["id"]))
    assert sealed is not None and SECRET not in sealed and SECRET[6:] not in sealed
    assert SecretBox(SEALING_KEY).open(sealed) == SECRET
    assert (
        SecretBox(f"{Fernet.generate_key().decode()},{SEALING_KEY}").open(sealed) == SECRET
    )  # rotation


def test_a_deleted_subscription_is_gone_and_a_second_delete_is_404(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    webhook_id = subscribe(client, auth).json["id"]  # type: ignore[index]

    assert client.delete(f"/agents-api/webhooks/{webhook_id}", headers=auth).status_code == 204
    assert client.get("/agents-api/webhooks", headers=auth).json == {"webhooks": []}
    again = client.delete(f"/agents-api/webhooks/{webhook_id}", headers=auth)
    assert again.status_code == 404


def test_another_orgs_subscription_is_404_like_a_missing_one(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    webhook_id = subscribe(client, auth).json["id"]  # type: ignore[index]

    for method, path in [
        ("delete", f"/agents-api/webhooks/{webhook_id}"),
        ("get", f"/agents-api/webhooks/{webhook_id}/deliveries"),
    ]:
        answer = getattr(client, method)(path, headers=other_auth)
        assert answer.status_code == 404, (method, path)
    assert client.get("/agents-api/webhooks", headers=other_auth).json == {"webhooks": []}
    assert len(client.get("/agents-api/webhooks", headers=auth).json["webhooks"]) == 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://127.0.0.1/x"}, "url"),
        ({"url": "http://user:pw@127.0.0.1/"}, "url"),
        ({"url": "http://127.0.0.1:99999/"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "http://" + "a" * 3000}, "url"),
        ({"url": "http://127.0.0.1/ok\r\nX-Inj: 1"}, "url"),
        ({"events": []}, "events"),
        ({"events": ["topic.deleted"]}, "events"),
        ({"events": "facts.changed"}, "events"),
        ({"secret": "hunter2"}, "secret"),
        ({"secret": "whsec_" + "A" * 8}, "secret"),  # 6 bytes: too short to be a key
        ({"secret": "whsec_not*base64!"}, "secret"),
        ({"headers": {"x": "y"}}, "headers"),
    ],
)
def test_bad_subscriptions_are_422_naming_the_field_and_write_nothing(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    body: dict[str, Any],
    field: str,
) -> None:
    answer = subscribe(client, auth, **body)

    assert answer.status_code == 422, answer.json
    assert field in answer.json["error"]["message"]  # type: ignore[index]
    assert count_webhooks(session_factory, auth) == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",  # the cloud metadata service
        "http://10.0.0.7/",
        "http://[::1]/",
        "http://[::ffff:192.168.0.1]/",
        "http://0.0.0.0/",
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://[2002:7f00:1::]/",
        "http://[::ffff:0:7f00:1]/",
        "http://[fec0::1]/",
    ],
)
def test_loopback_private_and_link_local_targets_are_refused_unless_allowed(
    app: Any, auth: dict[str, str], session_factory: sessionmaker[Session], url: str
) -> None:
    client = app.test_client()  # DRIFTLESS_WEBHOOK_ALLOW_PRIVATE unset

    answer = subscribe(client, auth, url=url)

    assert answer.status_code == 422, answer.json
    message = answer.json["error"]["message"]
    assert (
        message.startswith("url: not a public address")
        and "DRIFTLESS_WEBHOOK_ALLOW_PRIVATE" in message
    )
    assert "127.0.0.1" not in message and "localhost" not in message  # internal DNS is not shown
    assert count_webhooks(session_factory, auth) == 0


def test_an_org_has_at_most_so_many_subscriptions(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    for _ in range(MAX_WEBHOOKS_PER_ORG):
        assert subscribe(client, auth).status_code == 201

    refused = subscribe(client, auth)

    assert refused.status_code == 409
    assert str(MAX_WEBHOOKS_PER_ORG) in refused.json["error"]["message"]  # type: ignore[index]
    assert subscribe(client, other_auth).status_code == 201  # another org's count is its own


@pytest.mark.parametrize("given", [None, SECRET], ids=["generated", "given"])
def test_without_a_sealing_key_a_subscription_is_refused_409_and_nothing_is_written_41(
    settings: Settings,
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
    auth: dict[str, str],
    given: str | None,
) -> None:
    from web.app import create_app

    unsealed = settings.model_copy(update={"secret_keys": None, "webhook_allow_private": True})
    client = create_app(unsealed, queue=queue, session_factory=session_factory).test_client()

    response = subscribe(client, auth, **({} if given is None else {"secret": given}))

    assert response.status_code == 409, response.json
    error = response.json["error"]
    assert error["code"] == "sealing_key_missing"
    assert "DRIFTLESS_SECRET_KEYS" in error["message"]
    assert count_webhooks(session_factory, auth) == 0
