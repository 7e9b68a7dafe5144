"""`driftless mcp`: the MCP server's command, contributed to the `driftless` CLI through
the `driftless.commands` entry point (pyproject.toml), so the worker's CLI never imports
the web. The server's modules load only when the command runs."""

from __future__ import annotations

import click

from shared.infra.config import load_settings_or_exit


@click.command()
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio",
              show_default=True, help="stdio: one local runtime; http: many.")  # fmt: skip
@click.option("--host", default="127.0.0.1", show_default=True, help="For --transport http.")
@click.option("--port", type=click.IntRange(1, 65535), default=8001, show_default=True,
              help="For --transport http.")  # fmt: skip
@click.option("--key", envvar="DRIFTLESS_API_KEY",
              help="API key for stdio (env DRIFTLESS_API_KEY); over http each request "
                   "sends its own 'Authorization: Bearer'.")  # fmt: skip
def mcp(transport: str, host: str, port: int, key: str | None) -> None:
    """Serve the built-in tools and the context stack over MCP."""
    from functools import partial

    import anyio

    from shared.auth.service import org_for_key
    from web.mcp.runtime import runtime_from_settings
    from web.mcp.server import serve_http, serve_stdio

    rt = runtime_from_settings(load_settings_or_exit())
    if transport == "http":
        serve_http(rt, host=host, port=port)
        return
    # Checked once up front so a misconfigured runtime fails at start, not at its first call.
    if not key:
        raise click.UsageError("stdio needs an API key: set DRIFTLESS_API_KEY (or --key)")
    with rt.unit_of_work() as uow:
        if org_for_key(uow=uow, key=key) is None:
            raise click.ClickException("DRIFTLESS_API_KEY is unknown or revoked")
    anyio.run(partial(serve_stdio, rt, api_key=key))
