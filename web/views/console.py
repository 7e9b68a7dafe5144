"""The console: one static page (web/console/) for every /console route, and `/` leads
there (the start banner prints the bare URL); it signs in with an API key in the browser
and talks to /agents-api like any other client."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, redirect, send_from_directory
from werkzeug.wrappers import Response as Redirect

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"

bp = Blueprint(
    "console", __name__, static_folder=str(CONSOLE_DIR), static_url_path="/console/static"
)


@bp.get("/console")
@bp.get("/console/")
@bp.get("/console/sessions/<sid>")
def page(sid: str | None = None) -> Response:
    """index.html: the page routes itself (deep links open their session after sign-in)."""
    response = send_from_directory(CONSOLE_DIR, "index.html")
    response.headers["Cache-Control"] = "no-cache"
    return response


@bp.get("/")
def root() -> Redirect:
    """The bare URL the start banner prints leads to the console (no key asked: a page)."""
    return redirect("/console")


@bp.get("/favicon.ico")
def favicon() -> Response:
    """The console's SVG icon, for browsers that ask for /favicon.ico before reading <link>."""
    return send_from_directory(CONSOLE_DIR, "favicon.svg", mimetype="image/svg+xml", max_age=86400)
