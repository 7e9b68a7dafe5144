"""The one redaction of upstream error texts ([4.1]): a key a provider echoes is never kept."""

from __future__ import annotations

import httpx

from shared.infra.redaction import REDACTED, credentials_of, redact

KEY = "sk-proj-4f1c9e2b7a0d"


def test_every_occurrence_of_every_secret_is_replaced_41() -> None:
    text = f"Incorrect API key provided: {KEY}; you sent {KEY} and whsec_abcdef"

    redacted = redact(text, [KEY, "whsec_abcdef", None, ""])

    assert KEY not in redacted and "whsec_abcdef" not in redacted
    assert redacted.count(REDACTED) == 3
    assert redact("nothing to hide", [KEY]) == "nothing to hide"


def test_a_placeholder_too_short_to_be_a_secret_leaves_the_text_readable_41() -> None:
    assert redact("the answer was not json", ["t", "the"]) == "the answer was not json"


def test_the_credentials_of_a_request_are_its_bearer_token_and_key_headers_41() -> None:
    request = httpx.Request(
        "POST",
        "https://llm.example/v1",
        headers={"Authorization": f"Bearer {KEY}", "api-key": "k-2345"},
    )

    assert KEY in credentials_of(request) and "k-2345" in credentials_of(request)
    assert credentials_of(None) == []
