"""Security headers on every response: the console may not be framed, sniffed or leak its URL.

Four constant headers do not need a library: flask-talisman would add a dependency and
an HTTPS redirect that belongs to the deployment's proxy, not to the app.
"""

from __future__ import annotations

from flask import Flask, Response

# The console is static files plus fetch() to /agents-api (its live events included) on
# this origin: nothing inline, nothing from elsewhere. One policy for every response
# keeps the rule simple; a JSON or SVG answer opened on its own gains from it too.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        # Forms are handled by script; should it fail to load, the sign-in form must
        # not fall back to a GET that puts the API key in the URL.
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # console URLs carry session ids
}


def install_security_headers(app: Flask) -> None:
    @app.after_request
    def _secure(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response
