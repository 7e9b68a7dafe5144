"""The session view's writing controls in a real browser: the composer posts to the
active topic, and the durable facts card adds, edits and deletes the scope's facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Api, LiveServer
from tests.browser.test_console import _new_session, _open_session
from tests.helpers import wait_for

pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
from playwright.sync_api import Page, expect


def _facts(api: Api) -> dict[str, Any]:
    facts: dict[str, Any] = api("GET", "/facts?agentId=planner&userId=ada")["facts"]
    return facts


def test_the_composer_posts_to_the_active_topic_and_the_thread_shows_it(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    sid = session["id"]
    _open_session(page, live_server.url, console_key, sid)

    composer = page.locator("form.composer")
    composer.locator('select[name="role"]').select_option("assistant")
    composer.locator('textarea[name="content"]').fill("Noted: invoices go out on Fridays.")
    composer.locator('textarea[name="content"]').press("Control+Enter")

    expect(composer.locator('[role="status"]')).to_have_text("Sent.")
    expect(composer.locator('textarea[name="content"]')).to_have_value("")
    expect(page.locator(".messages .msg-assistant")).to_contain_text("invoices go out on Fridays")
    [message] = api("GET", f"/sessions/{sid}/messages")["messages"]
    assert (message["role"], message["topicId"]) == ("assistant", session["activeTopicId"])
    assert js_errors == []


def test_the_thread_shows_each_speakers_name_and_the_composer_sends_one_43(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    sid = session["id"]
    api("POST", f"/sessions/{sid}/messages", {"role": "user", "name": "Caroline", "content": "Hi"})
    _open_session(page, live_server.url, console_key, sid)
    expect(page.locator(".messages .msg-user .speaker")).to_have_text("Caroline")

    composer = page.locator("form.composer")
    name = composer.locator('input[name="name"]')
    composer.locator('select[name="role"]').select_option("assistant")
    composer.locator('textarea[name="content"]').fill("Hello, Caroline.")
    name.fill("Mel anie")  # a space: the browser holds the post back, as the server would refuse it
    composer.locator('textarea[name="content"]').press("Control+Enter")
    assert name.evaluate("input => input.validity.patternMismatch") is True
    assert len(api("GET", f"/sessions/{sid}/messages")["messages"]) == 1
    name.fill("Melanie")
    composer.locator('textarea[name="content"]').press("Control+Enter")
    expect(composer.locator('[role="status"]')).to_have_text("Sent.")
    expect(page.locator(".messages .msg-assistant .speaker")).to_have_text("Melanie")
    stored = api("GET", f"/sessions/{sid}/messages")["messages"]
    assert [(m["role"], m["name"]) for m in stored] == [
        ("user", "Caroline"),
        ("assistant", "Melanie"),
    ]
    assert js_errors == []


def test_the_facts_card_adds_edits_and_deletes_the_scopes_facts(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    api("PUT", "/facts?agentId=planner&userId=ada", {"timezone": "Europe/Rome"})
    _open_session(page, live_server.url, console_key, session["id"])
    facts = page.locator(".facts")
    expect(facts).to_contain_text("Scope planner / ada")
    expect(facts.locator('[data-fact-key="timezone"] input')).to_have_value('"Europe/Rome"')

    facts.locator('input[name="fact-key"]').fill("deadline")
    facts.locator('input[name="fact-value"]').fill("Friday")  # plain text: stored as a string
    facts.locator(".add-fact button").click()
    expect(facts.locator('[data-fact-key="deadline"] input')).to_have_value('"Friday"')
    assert _facts(api) == {"timezone": "Europe/Rome", "deadline": "Friday"}

    edited = facts.locator('[data-fact-key="timezone"] input')
    edited.fill('{"zone": "Europe/Berlin"}')  # JSON: stored as JSON
    edited.press("Enter")
    wait_for(lambda: _facts(api)["timezone"] == {"zone": "Europe/Berlin"}, what="the edit")

    facts.get_by_role("button", name="Delete deadline").click()
    expect(facts.locator('[data-fact-key="deadline"]')).to_have_count(0)
    assert _facts(api) == {"timezone": {"zone": "Europe/Berlin"}}
    assert js_errors == []


def test_the_export_button_downloads_the_scopes_export(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    api("PUT", "/facts?agentId=planner&userId=ada", {"timezone": "Europe/Rome"})
    _open_session(page, live_server.url, console_key, session["id"])
    facts = page.locator(".facts")
    expect(facts).to_contain_text("Scope planner / ada")
    with page.expect_download() as download:
        facts.locator("button.export").click()
    assert download.value.suggested_filename == "driftless-planner-ada.ndjson"
    lines = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    assert lines[0]["type"] == "header"
    assert lines[0]["scope"] == {"agentId": "planner", "userId": "ada"}
    assert session["id"] in {line["id"] for line in lines if line["type"] == "session"}
    assert ("timezone", "Europe/Rome") in {
        (line["key"], line["value"]) for line in lines if line["type"] == "fact"
    }
    assert js_errors == []
