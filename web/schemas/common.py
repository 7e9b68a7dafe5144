"""The bases of every model, the error shape, `dump`, and paths and queries shared by features."""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    Tag,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from shared.domain.limits import MAX_SCOPE_ID_CHARS
from shared.domain.moments import in_utc
from shared.domain.storable import storable

# Scope ids come from the calling platform and are opaque (docs/contract.md): kept exactly as
# sent, whatever they hold (`:`, braces, spaces, any Unicode), bounded and not blank.
# Stripping them would make " ada" and "ada" one scope.
ScopeId = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_SCOPE_ID_CHARS, pattern=r"\S")
]

MOMENT_FORMAT = "an ISO-8601 timestamp with a timezone, such as 2026-01-01T00:00:00Z"


def _iso_8601(value: Any) -> Any:
    """ISO-8601 only (pydantic alone also reads `1700000000` as Unix time), and never a
    local time: without its offset the moment is unknown."""
    if not isinstance(value, str):
        return value
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"must be {MOMENT_FORMAT}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"has no timezone: it must be {MOMENT_FORMAT}")
    return parsed


# A moment a client names (`since`), in a query or a body: every datetime the API reads
# is one (tests/integration/web/test_datetimes.py walks the OpenAPI document for them).
Moment = Annotated[AwareDatetime, BeforeValidator(_iso_8601), AfterValidator(in_utc)]


def _true_or_false(value: Any) -> Any:
    """A query's yes/no as written in JSON: pydantic alone also reads `yes`, `on`, `1`
    and `t` (and their opposites), so `?context=yes` passed for a bool."""
    if not isinstance(value, str):
        return value
    if value not in ("true", "false"):
        raise ValueError("must be true or false")
    return value == "true"


# A yes/no query parameter (`?context=true`): `true` or `false`, nothing else.
QueryFlag = Annotated[bool, BeforeValidator(_true_or_false)]


class Input(BaseModel):
    """Every request model: each field is checked by `storable` before its own type."""

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """flask-openapi3 reads a query model's JSON schema on every request (to find its
        list fields): 2 ms, a fifth of a message post. The schema never changes, so the
        plain call is answered from a copy made once (a copy: callers may change it)."""
        if args or kwargs:
            return super().model_json_schema(*args, **kwargs)
        schema = _PLAIN_SCHEMAS.get(cls)
        if schema is None:
            schema = _PLAIN_SCHEMAS[cls] = super().model_json_schema()
        return copy.deepcopy(schema)

    @field_validator("*", mode="before")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return storable(value)


_PLAIN_SCHEMAS: dict[type[BaseModel], dict[str, Any]] = {}


class CamelModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, from_attributes=True, extra="forbid"
    )


class Body(CamelModel, Input):
    """A request body; JSON types are not coerced ("5" is not a number)."""

    model_config = ConfigDict(strict=True)


class OptionalBody(Body):
    """A body every field of which is optional: an empty request body means `{}`."""

    @model_validator(mode="before")
    @classmethod
    def _empty_is_empty_object(cls, data: Any) -> Any:
        return {} if data is None else data


# Tags of bodies that come in several forms (one message or a batch, say). A validation
# error's location starts with its form's tag; web/errors.py leaves it out of the field
# it names, which is the client's field ("messages.3.content").
FORM_TAGS: set[str] = set()


def body_form(name: str) -> Tag:
    """The tag of one form of a body (pydantic's tagged union), known to web/errors.py."""
    FORM_TAGS.add(name)
    return Tag(name)


def dump(model: BaseModel) -> dict[str, Any]:
    """JSON-ready camelCase dict."""
    return model.model_dump(mode="json", by_alias=True)


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


# --- paths and queries of several features --------------------------------------------


class SessionPath(BaseModel):
    sid: uuid.UUID


class TopicPath(BaseModel):
    tid: uuid.UUID


class ScopeQuery(CamelModel, Input):
    agent_id: ScopeId
    user_id: ScopeId
