"""driftless-client: the driftless memory service's HTTP API, over httpx.

    from driftless_client import Client

    with Client("http://127.0.0.1:8000", api_key) as driftless:
        session = driftless.create_session("support-bot", "user-42")
        turn = driftless.post_messages(
            session["id"], [{"role": "user", "content": "hi"}], context=True
        )
        turn["context"]["messages"]  # what the model gets next

Answers are the API's JSON (camelCase) as plain dicts; an error answer raises
`ApiError` (`.status`, `.code`, `.message`).
"""

from ._async import AsyncClient
from ._errors import ApiError
from ._sync import Client
from ._version import __version__

__all__ = ["ApiError", "AsyncClient", "Client", "__version__"]
