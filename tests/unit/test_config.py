from pathlib import Path

import pytest

from shared.infra.config import ConfigError, load_settings, load_settings_or_exit


def test_defaults_follow_the_contract() -> None:
    settings = load_settings({})
    assert settings.database_url is None and settings.redis_url is None
    assert settings.port == 8000
    assert settings.debounce_ms == 2000
    assert settings.drift_interval == 10
    assert settings.window == 20
    assert settings.scan_back == 10
    assert settings.memory_token_budget == 2000
    assert settings.reconcile_s == 60
    assert settings.home == Path(".driftless")


def test_values_are_parsed_from_strings() -> None:
    settings = load_settings(
        {"DRIFTLESS_WINDOW": "12", "PORT": "9000", "DATABASE_URL": "postgresql://h/db"}
    )
    assert settings.window == 12
    assert settings.port == 9000
    assert settings.database_url == "postgresql://h/db"


def test_blank_values_mean_unset() -> None:
    assert load_settings({"DATABASE_URL": "  ", "DRIFTLESS_WINDOW": ""}).window == 20


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DRIFTLESS_WINDOW", "twenty"),
        ("DRIFTLESS_WINDOW", "0"),
        ("PORT", "70000"),
        ("DRIFTLESS_DEBOUNCE_MS", "-5"),
        ("DRIFTLESS_LLM", "anthropic"),
        ("DATABASE_URL", "mysql://localhost/db"),
        ("REDIS_URL", "http://localhost"),
        # Out of the range an org's own limit is held to ([4.1]): 1e-20 a second overflowed
        # the bucket's expiry and let everything through.
        ("DRIFTLESS_ORG_REQUESTS_PER_S", "1e-20"),
        ("DRIFTLESS_ORG_REQUEST_BURST", "10000000"),
        ("DRIFTLESS_ORG_LLM_RPM", "2000000"),
        ("DRIFTLESS_ORG_MONTHLY_TOKENS", "10000000000000000"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({variable: value})
    assert variable in str(raised.value)
    assert repr(value) in str(raised.value)


def test_entry_points_exit_with_the_message() -> None:
    with pytest.raises(SystemExit) as raised:
        load_settings_or_exit({"DRIFTLESS_SCAN_BACK": "x"})
    assert "DRIFTLESS_SCAN_BACK" in str(raised.value.code)


def test_llm_provider_is_openai_only_with_a_key() -> None:
    assert load_settings({}).llm_provider == "local"
    assert load_settings({"OPENAI_API_KEY": "sk-test"}).llm_provider == "openai"
    assert load_settings({"OPENAI_API_KEY": "sk-test", "DRIFTLESS_LLM": "local"}).llm_provider == (
        "local"
    )


def test_the_window_block_must_fit_the_window() -> None:
    with pytest.raises(ConfigError, match="DRIFTLESS_WINDOW_BLOCK=30 must not exceed"):
        load_settings({"DRIFTLESS_WINDOW_BLOCK": "30"})
    assert load_settings({"DRIFTLESS_WINDOW_MODE": "sliding"}).window_mode == "sliding"


@pytest.mark.parametrize(
    ("webhook", "provider", "providers_private"),
    [
        (None, None, False),
        ("true", None, True),  # unset: the webhook setting's value, as before it had its own
        ("true", "false", False),  # a dev box's private receivers, public models only
        (None, "true", True),
    ],
)
def test_providers_may_be_private_follows_its_own_setting_else_the_webhooks_43(
    webhook: str | None, provider: str | None, providers_private: bool
) -> None:
    environ = {
        "DRIFTLESS_WEBHOOK_ALLOW_PRIVATE": webhook,
        "DRIFTLESS_PROVIDER_ALLOW_PRIVATE": provider,
    }
    settings = load_settings({k: v for k, v in environ.items() if v is not None})
    assert settings.providers_may_be_private is providers_private
    assert settings.webhook_allow_private is (webhook == "true")
