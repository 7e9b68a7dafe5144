"""An org's own model (bring your own key): set, shown without its key, removed.

The API key is sealed as webhook secrets are (shared/infra/sealing.py) and never leaves
the database in clear but to the process that calls the model with it: no answer and no
log line holds it. The base URL is a request the workers make on the org's behalf, so it
is under the webhooks' rules (shared/infra/targets.py): public addresses only, checked
here for a clear 422 and again at every connection (shared/providers/pinning.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import unicodedata
import uuid
from dataclasses import dataclass, field

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert

from shared.domain.errors import Invalid
from shared.infra.db.uow import UnitOfWork
from shared.infra.sealing import SecretBox, SecretUnavailable
from shared.infra.targets import UnsafeTarget, check_target
from shared.providers.models import OrgProvider, OrgProvidersVersion

log = logging.getLogger(__name__)

MAX_MODEL_LENGTH = 200
MAX_API_KEY_LENGTH = 4096


@dataclass(frozen=True)
class ProviderView:
    """What the org's calls use, as the API shows it: never the key."""

    source: str  # org | fleet
    model: str
    base_url: str | None  # the org's own; None: the fleet's (never shown to a tenant)
    updated_at: dt.datetime | None


@dataclass(frozen=True)
class OrgModel:
    """An org's provider as its calls need it. `api_key` is None when the key cannot be
    opened with the configured keys (its calls then fail, R14, rather than go elsewhere)."""

    base_url: str | None
    model: str
    updated_at: dt.datetime
    api_key: str | None = field(repr=False)


def set_provider(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID,
    base_url: str | None,
    api_key: str,
    model: str,
    box: SecretBox,
    allow_private: bool,
) -> ProviderView:
    """Make the org's summaries and drift calls use `model` at `base_url` with `api_key`."""
    if base_url is not None:
        try:
            check_target(base_url, allow_private=allow_private)
        except UnsafeTarget as exc:
            log.info("org %s: provider base url refused: %s", org_id, exc.detail)
            raise Invalid(f"baseUrl: {exc}") from None
    model = _checked_text("model", model, max_length=MAX_MODEL_LENGTH)
    api_key = _checked_text("apiKey", api_key, max_length=MAX_API_KEY_LENGTH)
    values = {"base_url": base_url, "model": model, "sealed_api_key": box.seal(api_key)}
    upsert = (
        insert(OrgProvider)
        .values(org_id=org_id, **values)
        .on_conflict_do_update(index_elements=["org_id"], set_={**values, "updated_at": func.now()})
        .returning(OrgProvider.updated_at)
    )
    updated_at = uow.session.execute(upsert).scalar_one()
    log.info("org %s: own model %s set (base url %s)", org_id, model, base_url or "the fleet's")
    return ProviderView(source="org", model=model, base_url=base_url, updated_at=updated_at)


def _checked_text(name: str, value: str, *, max_length: int) -> str:
    """`value` stripped, if it is a non-empty single line a request header can carry."""
    value = value.strip()
    if not value:
        raise Invalid(f"{name}: must not be empty")
    if len(value) > max_length:
        raise Invalid(f"{name}: at most {max_length} characters")
    if any(char.isspace() or unicodedata.category(char) == "Cc" for char in value):
        raise Invalid(f"{name}: must not hold spaces or control characters")
    return value


def get_provider(*, uow: UnitOfWork, org_id: uuid.UUID, fleet_model: str) -> ProviderView:
    """The model the org's calls use: its own, or the fleet's (`fleet_model`)."""
    row = uow.session.get(OrgProvider, org_id)
    if row is None:
        return ProviderView(source="fleet", model=fleet_model, base_url=None, updated_at=None)
    return ProviderView(
        source="org", model=row.model, base_url=row.base_url, updated_at=row.updated_at
    )


def delete_provider(*, uow: UnitOfWork, org_id: uuid.UUID) -> None:
    """Back to the fleet's model; nothing to do if the org has none of its own."""
    removed = uow.session.execute(delete(OrgProvider).where(OrgProvider.org_id == org_id))
    if removed.rowcount:  # type: ignore[attr-defined]
        log.info("org %s: own model removed, back to the fleet's", org_id)


def models_version(*, uow: UnitOfWork) -> int | None:
    """A number that changes whenever any org's own model does (one row, one index
    lookup); None if its row is gone, which a reader takes as "changed"."""
    return uow.session.scalar(select(OrgProvidersVersion.version))


def org_models(
    *, uow: UnitOfWork, box: SecretBox, known: dict[uuid.UUID, OrgModel]
) -> dict[uuid.UUID, OrgModel]:
    """Every org's own model, keys opened; an entry of `known` with the same updated_at is
    reused, so a refresh opens only the keys that changed."""
    rows = uow.session.execute(
        select(
            OrgProvider.org_id,
            OrgProvider.base_url,
            OrgProvider.model,
            OrgProvider.updated_at,
            OrgProvider.sealed_api_key,
        )
    ).all()
    models = {}
    for org_id, base_url, model, updated_at, sealed in rows:
        before = known.get(org_id)
        if before is not None and before.updated_at == updated_at:
            models[org_id] = before
            continue
        try:
            api_key: str | None = box.open(sealed)
        except SecretUnavailable as exc:
            log.error("org %s: its model's API key cannot be opened: %s", org_id, exc)
            api_key = None
        models[org_id] = OrgModel(
            base_url=base_url, model=model, updated_at=updated_at, api_key=api_key
        )
    return models
