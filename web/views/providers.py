"""The calling org's own model (bring your own key): set, shown without its key, removed."""

from __future__ import annotations

from typing import Any

from shared.llm.factory import configured_model
from shared.providers.service import delete_provider, get_provider, set_provider
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import dump
from web.schemas.providers import ProviderIn, ProviderOut
from web.views.common import api_blueprint

bp = api_blueprint("providers", "provider")


@bp.put("/provider", responses={200: ProviderOut})
def put_provider(body: ProviderIn) -> dict[str, Any]:
    """Use this OpenAI-compatible model for the org's summaries and drift calls; the API
    key is stored sealed and never shown again (409 `sealing_key_missing` when the server
    has no DRIFTLESS_SECRET_KEYS to seal it with)."""
    rt = runtime()
    with unit_of_work() as uow:
        shown = set_provider(
            uow=uow,
            org_id=current_org(),
            base_url=body.base_url,
            api_key=body.api_key,
            model=body.model,
            box=rt.secret_box,
            allow_private=rt.settings.providers_may_be_private,
        )
        answer = dump(ProviderOut.model_validate(shown))
        uow.commit()
    return answer


@bp.get("/provider", responses={200: ProviderOut})
def show_provider() -> dict[str, Any]:
    """The model the org's calls use: its own (never its key) or the fleet's."""
    fleet_model = configured_model(runtime().settings)
    with unit_of_work() as uow:
        shown = get_provider(uow=uow, org_id=current_org(), fleet_model=fleet_model)
    return dump(ProviderOut.model_validate(shown))


@bp.delete("/provider", responses={204: None})
def remove_provider() -> tuple[str, int]:
    """Back to the fleet's model (within seconds in every worker)."""
    with unit_of_work() as uow:
        delete_provider(uow=uow, org_id=current_org())
        uow.commit()
    return "", 204
