"""The console cannot be framed, sniffed or run inline script, and it has an icon."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

CONSOLE_URLS = [
    "/console",
    f"/console/sessions/{uuid.uuid4()}",
    "/console/static/console.js",
    "/console/static/favicon.svg",
    "/favicon.ico",
]


def _get(client: FlaskClient, url: str, **kwargs: Any) -> TestResponse:
    """GET and close: a static file's response holds the file open until closed."""
    response = client.get(url, **kwargs)
    response.get_data()
    response.close()
    return response


def _policy(response: TestResponse) -> dict[str, list[str]]:
    header = response.headers["Content-Security-Policy"]
    directives = (part.split() for part in header.split(";") if part.strip())
    return {name: sources for name, *sources in directives}


@pytest.mark.parametrize("url", CONSOLE_URLS)
def test_console_responses_carry_every_security_header(client: FlaskClient, url: str) -> None:
    response = _get(client, url)
    assert response.status_code == 200
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    policy = _policy(response)
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["script-src"] == ["'self'"]  # no 'unsafe-inline', no 'unsafe-eval'
    assert policy["default-src"] == ["'none'"]  # plugins, frames, fonts: nothing
    # The console's API calls and its live event stream are fetch() to this origin.
    assert policy["connect-src"] == ["'self'"]


def test_the_favicon_is_served_at_favicon_ico_as_svg(client: FlaskClient) -> None:
    response = _get(client, "/favicon.ico")
    assert response.status_code == 200
    assert response.mimetype == "image/svg+xml"
    assert response.data.lstrip().startswith(b"<svg")
    assert response.data == _get(client, "/console/static/favicon.svg").data


def test_the_console_page_links_its_favicon_and_has_no_inline_script_or_style(
    client: FlaskClient,
) -> None:
    html = _get(client, "/console").get_data(as_text=True)
    assert '<link rel="icon" href="/console/static/favicon.svg"' in html
    # Everything the CSP would block: <script> without src, handlers, style attributes.
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert scripts and all(" src=" in tag for tag in scripts)
    assert not re.search(r"\son[a-z]+\s*=", html)
    assert not re.search(r"\sstyle\s*=|<style\b", html)
    assert "javascript:" not in html


def test_api_responses_deny_framing_and_sniffing_too(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    for response in (
        _get(client, "/agents-api/scopes", headers=auth),  # 200
        _get(client, "/agents-api/scopes"),  # 401 from the auth hook
        _get(client, "/no-such-page"),  # 404 from routing
    ):
        assert response.headers["X-Frame-Options"] == "DENY", response.status
        assert response.headers["X-Content-Type-Options"] == "nosniff", response.status
        assert response.headers["Referrer-Policy"] == "no-referrer", response.status
