"""Operators' overrides of an org's limits (`driftless orgs set`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from shared.auth.models import Org
from shared.domain.errors import Invalid, NotFound
from shared.infra.db.uow import UnitOfWork

# Passed for a limit to give the org the fleet's default again (NULL in its row).
DEFAULT = "default"


@dataclass(frozen=True)
class OrgLimits:
    """An org's own limits; None: the fleet's default."""

    name: str
    requests_per_s: float | None
    request_burst: int | None


def set_request_limits(
    *, uow: UnitOfWork, org_name: str, requests_per_s: float | str | None = None,
    request_burst: int | str | None = None,
) -> OrgLimits:  # fmt: skip
    """Set the org's request rate and burst: a number, DEFAULT (the fleet's), or None
    (unchanged); returns its limits as they now are."""
    org = uow.session.scalar(select(Org).where(Org.name == org_name).with_for_update())
    if org is None:
        raise NotFound(f"no org named {org_name!r}")
    if requests_per_s is not None:
        if requests_per_s != DEFAULT and (
            not isinstance(requests_per_s, int | float) or not 0 <= requests_per_s < float("inf")
        ):
            raise Invalid("requests a second: a number, 0 or more (0: no limit), or 'default'")
        org.requests_per_s = None if requests_per_s == DEFAULT else float(requests_per_s)
    if request_burst is not None:
        if request_burst != DEFAULT and (not isinstance(request_burst, int) or request_burst < 1):
            raise Invalid("request burst: a whole number, 1 or more, or 'default'")
        org.request_burst = None if request_burst == DEFAULT else int(request_burst)
    uow.session.flush()
    return OrgLimits(org.name, org.requests_per_s, org.request_burst)
