"""The pure parts of webhooks: the backoff schedule, which targets are refused, how
secrets are checked and sealed, and the event types the API accepts."""

from __future__ import annotations

from typing import get_args

import pytest
from cryptography.fernet import Fernet

from shared.domain.errors import Invalid, SealingKeyMissing
from shared.infra.config import ConfigError, load_settings
from shared.infra.sealing import SecretBox, SecretUnavailable
from shared.infra.targets import UnsafeTarget, check_target
from shared.webhooks.delivery import MAX_BACKOFF_S, backoff_s
from shared.webhooks.events import EVENT_TYPES
from shared.webhooks.secrets import checked_secret, new_secret
from web.schemas.webhooks import EventType


def test_the_backoff_doubles_from_the_base_jittered_in_its_upper_half_capped_at_6_hours() -> None:
    lowest = [backoff_s(n, base_s=5, rng=lambda: 0.0) for n in range(1, 6)]
    highest = [backoff_s(n, base_s=5, rng=lambda: 1.0) for n in range(1, 6)]

    assert highest == [5, 10, 20, 40, 80]
    assert lowest == [2.5, 5, 10, 20, 40]
    assert backoff_s(40, base_s=5, rng=lambda: 1.0) == MAX_BACKOFF_S == 6 * 3600


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/", "http://localhost:8000/", "http://169.254.169.254/latest",
        "http://10.1.2.3/", "http://172.16.0.1/", "http://192.168.1.1/", "http://[::1]/",
        "http://[fe80::1]/", "http://[::ffff:127.0.0.1]/", "http://0.0.0.0/",
        "http://100.64.0.1/",  # carrier-grade NAT: not public either
    ],
)  # fmt: skip
def test_loopback_private_link_local_and_reserved_addresses_are_refused(url: str) -> None:
    with pytest.raises(
        UnsafeTarget, match=r"^not a public address.*DRIFTLESS_WEBHOOK_ALLOW_PRIVATE"
    ):
        check_target(url, allow_private=False)
    check_target(url, allow_private=True)  # a dev box may


@pytest.mark.parametrize(
    "url",
    [
        "http://[::127.0.0.1]/",  # IPv4-compatible
        "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
        "http://[64:ff9b::a00:1]/",  # NAT64 of 10.0.0.1
        "http://[64:ff9b:1::808:808]/",  # local-use NAT64: whatever it embeds
        "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
        "http://[2002:a9fe:a9fe::1]/",  # 6to4 of 169.254.169.254
        "http://[::ffff:0:7f00:1]/",  # IPv4-translated (SIIT)
        "http://[fec0::1]/",  # site-local
    ],
)  # fmt: skip
def test_ipv6_addresses_that_embed_a_non_public_ipv4_or_are_site_local_are_refused(
    url: str,
) -> None:
    with pytest.raises(UnsafeTarget, match="not a public address"):
        check_target(url, allow_private=False)


@pytest.mark.parametrize(
    "url",
    [
        "https://8.8.8.8/hooks", "http://[2001:4860:4860::8888]:8080/x",
        "http://[64:ff9b::808:808]/", "http://[2002:808:808::1]/", "http://[::ffff:8.8.8.8]/",
    ],
)  # fmt: skip
def test_a_public_address_is_a_target(url: str) -> None:
    check_target(url, allow_private=False)


def test_a_refusal_tells_the_tenant_only_that_the_address_is_not_public() -> None:
    with pytest.raises(UnsafeTarget) as refused:
        check_target("http://localhost:5432/", allow_private=False)

    assert str(refused.value).startswith("not a public address")
    assert "127.0.0.1" not in str(refused.value) and "localhost" not in str(refused.value)
    assert "localhost" in refused.value.detail and "127.0.0.1" in refused.value.detail


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://8.8.8.8/", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("http:///path", "no host"),
        ("https://user:pw@8.8.8.8/", "credentials"),
        ("http://8.8.8.8:70000/", "not a valid URL"),
        ("http://8.8.8.8/ok\r\nX-Inj: 1", "not a valid URL"),
        ("http://8.8.8.8/ok X", "not a valid URL"),
        ("http://8.8.8.8/\x7f", "not a valid URL"),
        ("http://[1::2::3]/", "not a valid URL"),
        ("http://[v1.x]/", "not a valid URL"),
        ("http://\u00e9\u00e9-.com/", "not a valid URL"),  # no IDNA form: httpx cannot send it
        # Not "does not resolve": which internal names exist is not the tenant's to map.
        ("http://no-such-host.invalid/", "not a public address"),
    ],
)
def test_urls_that_are_not_http_targets_are_refused_whatever_is_allowed(url: str, why: str) -> None:
    with pytest.raises(UnsafeTarget, match=why):
        # Private targets allowed or not: only a name is resolved, and only when it counts.
        check_target(url, allow_private=not url.endswith(".invalid/"))


def test_secrets_are_the_standard_webhooks_form() -> None:
    made = new_secret()
    assert made.startswith("whsec_") and checked_secret(made) == made
    for bad in ["hunter2", "whsec_", "whsec_AAAA", "whsec_!!!!", "whsec_" + "A" * 200]:
        with pytest.raises(Invalid, match="secret"):
            checked_secret(bad)


def test_a_sealed_secret_opens_only_with_a_listed_key() -> None:
    key, other = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    sealed = SecretBox(key).seal("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")

    assert "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" not in sealed
    assert SecretBox(f"{other},{key}").open(sealed).endswith("LaLaSw")  # after a rotation
    with pytest.raises(SecretUnavailable):
        SecretBox(other).open(sealed)
    with pytest.raises(SecretUnavailable):
        SecretBox(None).open(sealed)
    assert SecretBox(None).open("plain:whsec_x") == "whsec_x"  # stored as given before [4.1]


def test_without_keys_a_secret_is_refused_not_stored_as_given_41() -> None:
    with pytest.raises(SealingKeyMissing, match="DRIFTLESS_SECRET_KEYS"):
        SecretBox(None).seal("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")


def test_a_bad_key_stops_the_process_at_start_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="DRIFTLESS_SECRET_KEYS"):
        load_settings({"DRIFTLESS_SECRET_KEYS": "not-a-fernet-key"})
    with pytest.raises(ConfigError, match="DRIFTLESS_WEBHOOK_KEYS"):
        load_settings({"DRIFTLESS_WEBHOOK_KEYS": "not-a-fernet-key"})
    with pytest.raises(ConfigError, match="DRIFTLESS_WEBHOOK_MAX_ATTEMPTS"):
        load_settings({"DRIFTLESS_WEBHOOK_MAX_ATTEMPTS": "0"})


def test_the_api_accepts_exactly_the_event_types_the_outbox_records() -> None:
    assert get_args(EventType) == EVENT_TYPES
