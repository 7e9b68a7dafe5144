"""The console in a real browser, against the live web server and a real worker.

Hooks (docs/contract.md, "Console"): the sign-in input `name="api-key"`, topic rows
`data-topic-id`, the active row `data-active="true"`, the toggle `<button
data-memory-state>`, the search box `<input type="search" name="search">`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Api, LiveServer
from tests.helpers import wait_for
from worker.demo import DECISIONS
from worker.demo import HIKE as DEMO_HIKE

pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
from playwright.sync_api import Page, expect

# The demo's conversation: billing decisions, then a clear change of subject.
BILLING, HIKE = DECISIONS, DEMO_HIKE


def _new_session(api: Api, agent: str = "planner", user: str = "ada") -> dict[str, Any]:
    session: dict[str, Any] = api("POST", "/sessions", {"agentId": agent, "userId": user})
    return session


def _talk(api: Api, sid: str, messages: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [
        api("POST", f"/sessions/{sid}/messages", {"role": role, "content": content})
        for role, content in messages
    ]


def _sign_in(page: Page, base_url: str, key: str, path: str = "/console") -> None:
    page.goto(base_url + path)
    field = page.locator('input[name="api-key"]')
    expect(field).to_be_visible()
    field.fill(key)
    field.press("Enter")
    expect(page.locator("#sign-out")).to_be_visible()
    expect(page.locator("#signin")).to_be_hidden()


def _open_session(page: Page, base_url: str, key: str, sid: str) -> None:
    """Deep link, sign in, and wait until the live connection is up."""
    _sign_in(page, base_url, key, f"/console/sessions/{sid}")
    expect(page.locator("[data-topic-id]").first).to_be_visible()
    expect(page.locator(".live")).to_have_attribute("data-live", "live")


def test_sign_in_with_the_api_key_by_pressing_enter(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    page.goto(f"{live_server.url}/console")
    field = page.locator('input[name="api-key"]')

    field.fill("not-a-key")
    field.press("Enter")
    expect(page.locator("#signin-error")).to_contain_text("unknown or revoked API key")
    expect(page.locator("#sign-out")).to_be_hidden()

    field.fill(console_key)
    field.press("Enter")
    expect(page.locator("#signin")).to_be_hidden()
    expect(page.locator("#sign-out")).to_be_visible()
    scope = page.get_by_role("link", name="planner / ada")
    expect(scope).to_contain_text("1 session")
    assert page.evaluate("sessionStorage.getItem('driftless.apiKey')") == console_key

    scope.click()  # in-app navigation (History API): the scope's sessions
    expect(page).to_have_url(f"{live_server.url}/console?agentId=planner&userId=ada")
    page.locator(f'[data-session-id="{session["id"]}"]').click()
    expect(page).to_have_url(f"{live_server.url}/console/sessions/{session['id']}")
    expect(page.locator(f'[data-topic-id="{session["activeTopicId"]}"]')).to_have_attribute(
        "data-active", "true"
    )
    assert js_errors == []


def test_the_brain_toggle_cycles_none_promoted_deprecated_none(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    tid = session["activeTopicId"]
    _open_session(page, live_server.url, console_key, session["id"])
    toggle = page.locator(f'[data-topic-id="{tid}"] button[data-memory-state]')
    expect(toggle).to_have_attribute("data-memory-state", "none")
    expect(toggle).to_have_attribute("aria-label", "Memory: none. Activate to change.")

    for step, state in enumerate(("promoted", "deprecated", "none")):
        if step == 2:  # by keyboard: the toggle is a focusable button
            toggle.focus()
            page.keyboard.press("Enter")
        else:
            toggle.click()
        expect(toggle).to_have_attribute("data-memory-state", state)
        expect(toggle).to_have_attribute(
            "aria-label", f"Memory: {state} (set by user). Activate to change."
        )
        topic = api("GET", f"/topics/{tid}")
        assert (topic["memoryState"], topic["memoryStateSetBy"]) == (state, "user")
    expect(toggle).to_be_focused()  # re-rendering keeps the keyboard user's place
    assert js_errors == []


def test_a_fork_by_the_worker_shows_up_live(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    sid, billing = session["id"], session["activeTopicId"]
    _open_session(page, live_server.url, console_key, sid)
    page.evaluate("window.__sameDocument = true")

    posted = _talk(api, sid, BILLING + HIKE)
    assert posted[-1]["driftEvaluationEnqueued"]  # the 10th message's heartbeat (R26)

    rows = page.locator("[data-topic-id]")
    expect(rows).to_have_count(2)
    new_row = page.locator(f'[data-topic-id]:not([data-topic-id="{billing}"])')
    expect(new_row).to_have_attribute("data-active", "true")
    expect(page.locator(f'[data-topic-id="{billing}"]')).not_to_have_attribute(
        "data-active", "true"
    )
    # The thread follows the new active topic: the hike moved there.
    expect(page.locator(".messages")).to_contain_text("Dolomites")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    assert api("GET", f"/sessions/{sid}")["activeTopicId"] == new_row.get_attribute("data-topic-id")
    assert js_errors == []


def test_hiding_then_leaving_the_page_runs_one_evaluation(
    page: Page, live_server: LiveServer, console_key: str, api: Api
) -> None:
    session = _new_session(api)
    sid, tid = session["id"], session["activeTopicId"]
    _talk(api, sid, [("user", "Remember: invoices are in EUR.")])  # not "unchanged"
    _open_session(page, live_server.url, console_key, sid)

    page.evaluate(
        """() => {
            const hidden = (name, value) =>
                Object.defineProperty(document, name, {value, configurable: true});
            hidden("visibilityState", "hidden");
            hidden("hidden", true);
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    triggers = live_server.trigger_log.triggers
    # The two requests race when sent together; the server must have handled the
    # first before the second leaves, or "the burst's first trigger" is a coin toss.
    wait_for(lambda: triggers(sid) == ["visibility"], timeout=20, what="the hide trigger")
    page.goto(f"{live_server.url}/console")  # leave the session view: pagehide
    expect(page.locator("#scopes-heading")).to_be_visible()
    wait_for(
        lambda: sorted(map(str, triggers(sid))) == ["navigation", "visibility"],
        timeout=20,
        what="both exit triggers at the server",
    )

    wait_for(
        lambda: api("GET", f"/topics/{tid}/evaluations")["evaluations"],
        timeout=20,
        what="the evaluation",
    )
    time.sleep(3.5)  # > the 2000 ms debounce: a second run would have started by now
    evaluations = api("GET", f"/topics/{tid}/evaluations")["evaluations"]
    assert len(evaluations) == 1, evaluations
    assert evaluations[0]["trigger"] == "visibility"  # the burst's first trigger


def test_screenshot_of_the_session_view(
    page: Page,
    live_server: LiveServer,
    console_key: str,
    api: Api,
    artifacts: Path,
    js_errors: list[str],
) -> None:
    api(
        "PUT",
        "/agents/planner",
        {"soul": "You are Planner: terse, exact, and you remember decisions.", "skills": []},
    )
    session = _new_session(api)
    sid, billing = session["id"], session["activeTopicId"]
    api("PUT", "/facts?agentId=planner&userId=ada", {"timezone": "Europe/Rome"})
    _talk(api, sid, BILLING[:4])
    api(
        "POST",
        f"/sessions/{sid}/tools/notes",
        {"arguments": {"op": "$set", "content": "Stack: PostgreSQL + Alembic. Ship Friday."}},
    )
    api(
        "POST",
        f"/sessions/{sid}/tools/important_info",
        {"arguments": {"op": "$set", "key": "billing_deadline", "value": "Friday"}},
    )
    _talk(api, sid, BILLING[4:] + HIKE)
    wait_for(lambda: len(api("GET", f"/sessions/{sid}")["topics"]) == 2, what="the fork")

    _open_session(page, live_server.url, console_key, sid)
    expect(page.locator("[data-topic-id]")).to_have_count(2)
    page.locator(f'[data-topic-id="{billing}"] .topic-open').click()  # the forked-from topic
    expect(page.locator(".msg-tool").first).to_be_visible()
    expect(page.locator(".summary")).to_be_visible()  # summarized by the worker
    expect(page.locator(".evals li").first).to_contain_text("fork")
    page.locator(".layer-stable summary").click()
    shot = artifacts / "console-session.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    page.set_viewport_size({"width": 360, "height": 800})  # readable on a phone
    expect(page.locator(f'[data-topic-id="{billing}"] button[data-memory-state]')).to_be_visible()
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"{overflow}px of horizontal scroll at 360px"
    page.screenshot(path=str(artifacts / "console-session-360.png"), full_page=True)
    assert js_errors == []


def test_the_home_page_lists_the_orgs_reevaluations_with_their_progress(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    _talk(api, session["id"], [("user", "We ship the billing stack on Friday.")])
    running = api("POST", "/reevaluations", {"rate": 0.1})  # no beat here: it stays running
    finished = api("POST", "/reevaluations", {"agentId": "nobody"})  # nothing to do
    try:
        _sign_in(page, live_server.url, console_key)
        rows = page.locator("[data-reevaluation-id]")
        expect(rows).to_have_count(2)
        expect(rows.first).to_have_attribute("data-reevaluation-id", finished["id"])  # newest
        row = page.locator(f'[data-reevaluation-id="{running["id"]}"]')
        expect(row).to_have_attribute("data-state", "running")
        expect(row).to_contain_text("0 / 1 topic")
        expect(rows.first).to_have_attribute("data-state", "finished")
        assert js_errors == []
    finally:
        api("DELETE", f"/reevaluations/{running['id']}")  # committed: no later tick takes it


def test_search_over_the_scope_reveals_each_result_in_its_thread(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    forked = _new_session(api)
    sid, billing = forked["id"], forked["activeTopicId"]
    _talk(api, sid, BILLING + HIKE)
    wait_for(lambda: len(api("GET", f"/sessions/{sid}")["topics"]) == 2, what="the fork")
    other = _new_session(api)
    _talk(api, other["id"], [("user", "The warehouse in Rotterdam closes at six.")])
    _new_session(api, user="grace")  # another scope: never searched
    _open_session(page, live_server.url, console_key, sid)
    page.evaluate("window.__sameDocument = true")
    box = page.locator('input[type="search"][name="search"]')
    results = page.locator(".search-results")
    billing_row = page.locator(f'[data-topic-id="{billing}"]')
    expect(billing_row).not_to_have_attribute("data-active", "true")  # the hike is active

    # In this session: the closed billing topic is selected, highlighted, its thread shown.
    box.fill("Alembic migrations")
    box.press("Enter")
    hit = results.locator('li[data-kind="message"]').filter(has_text="with Alembic for")
    expect(hit).to_contain_text("this session")
    hit.click()
    expect(billing_row).to_have_attribute("data-found", "true")
    expect(billing_row).to_have_class("topic selected")
    expect(billing_row.locator('[data-role="open"]')).to_be_focused()
    found = page.locator('.messages [data-found="true"]')
    expect(found).to_contain_text("PostgreSQL it is, with Alembic for migrations.")
    expect(found).to_be_in_viewport()
    assert page.evaluate("window.__sameDocument") is True  # no reload happened

    # In another session of the scope: the router opens it and reveals the topic there.
    box.fill("Rotterdam")
    box.press("Enter")
    hit = results.locator('li[data-kind="message"]')
    expect(hit).to_contain_text("The warehouse in Rotterdam closes at six.")
    hit.click()
    expect(page).to_have_url(
        re.compile(rf"/console/sessions/{other['id']}\?topic={other['activeTopicId']}&message=")
    )
    expect(page.locator(f'[data-topic-id="{other["activeTopicId"]}"]')).to_have_attribute(
        "data-found", "true"
    )
    expect(page.locator(".messages")).to_contain_text("Rotterdam")
    assert page.evaluate("window.__sameDocument") is True

    box = page.locator('input[type="search"][name="search"]')  # the new view's box
    box.fill("zeppelin")
    box.press("Enter")
    expect(results).to_have_text("No matches.")
    box.fill("x" * 1001)  # the server's 422, named by its field
    box.press("Enter")
    expect(results.locator(".error")).to_have_text("q: at most 1000 characters")
    assert js_errors == []


def test_search_from_the_home_page_opens_the_session_of_the_result(
    page: Page, live_server: LiveServer, console_key: str, api: Api, js_errors: list[str]
) -> None:
    session = _new_session(api)
    _talk(api, session["id"], [("user", "Our invoices are issued in EUR.")])
    _sign_in(page, live_server.url, console_key, "/console?agentId=planner&userId=ada")
    box = page.locator('input[type="search"][name="search"]')
    box.fill("invoices")
    box.press("Enter")
    page.locator(".search-results li").first.click()
    expect(page).to_have_url(re.compile(rf"/console/sessions/{session['id']}\?topic="))
    row = page.locator(f'[data-topic-id="{session["activeTopicId"]}"]')
    expect(row).to_have_attribute("data-found", "true")
    assert js_errors == []
