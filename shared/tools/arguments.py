"""The tools' arguments, validated: a malformed call is refused before anything is written."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from shared.domain.errors import Invalid
from shared.domain.limits import MAX_FACT_KEY_CHARS, MAX_TOOL_ARGUMENTS_CHARS, Limits, check_json
from shared.domain.storable import unstorable_at
from shared.search.service import MAX_LIMIT, MAX_QUERY_CHARS

MAX_NOTE_CHARS = 20_000
# A recall answers fewer results than the API's default: they enter the model's context.
RECALL_LIMIT = 5


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_by_name=True, strict=True)


class NotesSet(_Arguments):
    op: Literal["$set"]
    content: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)


class NotesRead(_Arguments):
    op: Literal["read"]
    topic_id: Annotated[uuid.UUID | None, Field(alias="topicId", strict=False)] = None


class NotesUpdate(_Arguments):
    op: Literal["update"]
    content: str = Field(max_length=MAX_NOTE_CHARS)


class FactSet(_Arguments):
    op: Literal["$set"]
    key: str = Field(min_length=1, max_length=MAX_FACT_KEY_CHARS)
    value: Any


class FactRead(_Arguments):
    op: Literal["read"]
    key: str | None = Field(default=None, min_length=1, max_length=MAX_FACT_KEY_CHARS)


class FactUnset(_Arguments):
    op: Literal["$unset"]
    key: str = Field(min_length=1, max_length=MAX_FACT_KEY_CHARS)


class CurateTopic(_Arguments):
    action: Literal["promote", "demote", "deprecate"]
    topic_id: Annotated[uuid.UUID, Field(alias="topicId", strict=False)]


class Recall(_Arguments):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    limit: int = Field(default=RECALL_LIMIT, ge=1, le=MAX_LIMIT)


NotesArguments = Annotated[NotesSet | NotesRead | NotesUpdate, Field(discriminator="op")]
FactArguments = Annotated[FactSet | FactRead | FactUnset, Field(discriminator="op")]

ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "notes": TypeAdapter(NotesArguments),
    "important_info": TypeAdapter(FactArguments),
    "manage_topic_memory": TypeAdapter(CurateTopic),
    "recall": TypeAdapter(Recall),
}


def parse_arguments(tool: str, arguments: Any, *, limits: Limits) -> Any:
    """The typed arguments of `tool`, or Invalid naming each bad field."""
    # Depth first: the checks after it recurse, and would fail on what it refuses.
    check_json(arguments, field="arguments", limits=limits)
    size = len(json.dumps(arguments, ensure_ascii=False))
    if size > MAX_TOOL_ARGUMENTS_CHARS:
        raise Invalid(
            f"arguments: {size} characters as JSON; a tool call takes at most"
            f" {MAX_TOOL_ARGUMENTS_CHARS}"
        )
    where = unstorable_at(arguments, "")
    if where is not None:
        raise Invalid(
            f"arguments.{where}: text with a NUL character (\\u0000) or an unpaired"
            " surrogate cannot be stored"
        )
    try:
        return ADAPTERS[tool].validate_python(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"arguments.{_field_of(error)}: {error['msg']}" for error in exc.errors()
        )
        raise Invalid(problems) from None


def _field_of(error: ErrorDetails) -> str:
    """The dotted field an error is about; a bad `op`/`action` tag has an empty loc."""
    path = [str(part) for part in error["loc"] if not str(part).startswith("$")]
    if not path and error["type"] in {"union_tag_invalid", "union_tag_not_found"}:
        return str(error.get("ctx", {}).get("discriminator", "")).strip("'")
    return ".".join(path)
