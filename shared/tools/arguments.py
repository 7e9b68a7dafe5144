"""The tools' arguments, validated: a malformed call is refused before anything is written."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from shared.errors import Invalid

MAX_NOTE_CHARS = 20_000
MAX_FACT_KEY_CHARS = 200


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


NotesArguments = Annotated[NotesSet | NotesRead | NotesUpdate, Field(discriminator="op")]
FactArguments = Annotated[FactSet | FactRead | FactUnset, Field(discriminator="op")]

ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "notes": TypeAdapter(NotesArguments),
    "important_info": TypeAdapter(FactArguments),
    "manage_topic_memory": TypeAdapter(CurateTopic),
}


def parse_arguments(tool: str, arguments: Any) -> Any:
    """The typed arguments of `tool`, or Invalid naming each bad field."""
    try:
        return ADAPTERS[tool].validate_python(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            "arguments."
            + ".".join(str(p) for p in error["loc"] if not str(p).startswith("$"))
            + f": {error['msg']}"
            for error in exc.errors()
        )
        raise Invalid(problems) from None
