"""The export format, version 1: NDJSON, one line model per "type" (docs/export-format.md).

Export writes these lines and import reads them, so both go through the models here:
a field renamed on one side is a validation error on the other, not a silent loss.
Ids are the source system's; times are ISO 8601 in UTC with a "Z".
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from shared.domain.errors import Invalid
from shared.domain.moments import in_utc

FORMAT: Final = "driftless.export"
VERSION: Final = 1


# Serialized as "…Z" only when the offset is UTC (the database hands back its own zone);
# a moment with no UTC spelling is refused as the API's are.
Timestamp = Annotated[AwareDatetime, AfterValidator(in_utc)]


class LineModel(BaseModel):
    """What every line model shares: camelCase names, nothing unknown, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )


class Scope(LineModel):
    """What was exported: an agent, a user of it, or (both None) a whole org."""

    agent_id: str | None
    user_id: str | None


class Header(LineModel):
    type: Literal["header"] = "header"
    format: Literal["driftless.export"] = FORMAT
    version: Literal[1] = VERSION
    exported_at: Timestamp
    scope: Scope


class Agent(LineModel):
    type: Literal["agent"] = "agent"
    agent_id: str
    soul: str
    skills: list[Any]
    tools: list[Any]
    created_at: Timestamp
    updated_at: Timestamp


class Session(LineModel):
    type: Literal["session"] = "session"
    id: uuid.UUID
    agent_id: str
    user_id: str
    created_at: Timestamp
    last_activity_at: Timestamp


class Topic(LineModel):
    type: Literal["topic"] = "topic"
    id: uuid.UUID
    session_id: uuid.UUID
    status: Literal["active", "closed"]
    title: str | None
    summary: str | None
    summary_source: Literal["llm", "fallback"] | None
    summary_model: str | None
    summary_prompt_version: str | None
    keep_in_memory: bool
    keep_in_memory_manually_set: bool
    deprecated: bool
    deprecated_manually_set: bool
    memory_state_set_by: str | None
    created_at: Timestamp
    closed_at: Timestamp | None
    summarized_at: Timestamp | None
    summarized_through_message_id: int | None


class Fork(LineModel):
    """A silent fork of the session (shared/topics/models.py Fork): its drift record."""

    type: Literal["fork"] = "fork"
    id: int
    session_id: uuid.UUID
    from_topic_id: uuid.UUID
    to_topic_id: uuid.UUID
    from_title: str | None
    to_title: str | None
    first_message_id: int
    created_at: Timestamp


class Message(LineModel):
    type: Literal["message"] = "message"
    id: int
    session_id: uuid.UUID
    topic_id: uuid.UUID
    role: Literal["user", "assistant", "tool"]
    content: str
    # Who spoke (shared/domain/limits.py check_message_name); optional: an older writer
    # has no such field.
    name: str | None = None
    tool_name: str | None
    tool_call_id: str | None
    created_at: Timestamp


class Note(LineModel):
    """A topic's notes document (R23: at most one active per topic; archived ones too)."""

    type: Literal["note"] = "note"
    topic_id: uuid.UUID
    content: str
    updated_at: Timestamp
    id: uuid.UUID | None = None
    status: Literal["active", "archived"] = "active"
    created_at: Timestamp | None = None
    archived_at: Timestamp | None = None


class Curation(LineModel):
    """One move of a topic's memory state (shared/curation/models.py MemoryChange)."""

    type: Literal["curation"] = "curation"
    topic_id: uuid.UUID
    actor: Literal["user", "agent", "summarizer"]
    action: str
    from_state: Literal["none", "promoted", "deprecated"]
    to_state: Literal["none", "promoted", "deprecated"]
    keep_in_memory_manually_set: bool
    deprecated_manually_set: bool
    created_at: Timestamp


class Fact(LineModel):
    """One value a fact held, from `valid_from` until `valid_to` (None: the current value)."""

    type: Literal["fact"] = "fact"
    agent_id: str
    user_id: str
    key: str
    value: Any
    valid_from: Timestamp
    valid_to: Timestamp | None
    changed_by: Literal["user", "agent", "import"]
    # Who removed the key at valid_to; None when a new value replaced it, or it holds.
    removed_by: Literal["user", "agent", "import"] | None = None


Line = Annotated[
    Header | Agent | Session | Topic | Fork | Message | Note | Curation | Fact,
    Field(discriminator="type"),
]
LINE_TYPES = ("header", "agent", "session", "topic", "fork", "message", "note", "curation", "fact")

_LINE: TypeAdapter[Line] = TypeAdapter(Line)


def parse_line(text: str | bytes) -> Line:
    """One line of an export as its model, or Invalid naming what is wrong with it."""
    # The common case in one pass of pydantic-core's own JSON parser (an import spends
    # most of its Python time here); a line it refuses is parsed again below, slowly, to
    # name what is wrong with it.
    try:
        line = _LINE.validate_json(text)
    except ValidationError:
        return _refused(text)
    if isinstance(line, Header) and line.version != VERSION:
        return _refused(text)
    return line


def _refused(text: str | bytes) -> Line:
    """The line pydantic-core refused: why, as Invalid (or the line, if it was fine)."""
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise Invalid(f"the line is not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise Invalid("the line is not a JSON object")
    kind = raw.get("type")
    if kind not in LINE_TYPES:
        raise Invalid(f"unknown line type {kind!r}; expected one of {', '.join(LINE_TYPES)}")
    if kind == "header" and raw.get("version") != VERSION:
        # The version rule: an importer refuses what it does not know, never guesses.
        raise Invalid(
            f"unsupported export version {raw.get('version')!r};"
            f" this server reads version {VERSION}"
        )
    try:
        return _LINE.validate_python(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "the line"
        raise Invalid(
            f"invalid {kind} line: {where}: {first['msg']}"
            + (f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else "")
        ) from None


def dump_line(model: LineModel) -> str:
    """The model as one line of the export, without its newline."""
    return model.model_dump_json()
