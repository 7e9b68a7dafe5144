"""Request and response models: one source for validation and for the OpenAPI document."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from shared.storable import storable

# Scope ids come from the calling platform and are opaque (CONTRACT.md): kept exactly as
# sent, whatever they hold (`:`, braces, spaces, any Unicode), bounded and not blank.
# Stripping them would make " ada" and "ada" one scope.
ScopeId = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"\S")]
MAX_MESSAGE_CHARS = 100_000


class Input(BaseModel):
    """Every request model: each field is checked by `storable` before its own type."""

    @field_validator("*", mode="before")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return storable(value)


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


# --- paths and queries -------------------------------------------------------------


class SessionPath(BaseModel):
    sid: uuid.UUID


class TopicPath(BaseModel):
    tid: uuid.UUID


class AgentPath(Input):
    agent_id: ScopeId


class MessageQuery(CamelModel, Input):
    topic_id: uuid.UUID | None = None
    after_id: int | None = Field(default=None, ge=0)
    limit: int = Field(default=1000, ge=1, le=1000)


# --- bodies ------------------------------------------------------------------------


class AgentIn(Body):
    soul: str = Field(default="", max_length=50_000)
    skills: list[Any] = Field(default_factory=list, max_length=200)
    tools: list[dict[str, Any]] = Field(default_factory=list, max_length=200)


class SessionIn(Body):
    agent_id: ScopeId
    user_id: ScopeId


class MessageIn(Body):
    role: Literal["user", "assistant", "tool"]
    content: str = Field(max_length=MAX_MESSAGE_CHARS)
    tool_name: str | None = Field(default=None, min_length=1, max_length=200)
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _tool_fields_only_on_tool_messages(self) -> MessageIn:
        if self.role != "tool" and (self.tool_name or self.tool_call_id):
            raise ValueError("toolName and toolCallId are only allowed when role is 'tool'")
        return self


class TopicIn(OptionalBody):
    title: str | None = Field(default=None, min_length=1, max_length=500)


# --- responses ---------------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


class AgentOut(CamelModel):
    agent_id: str
    soul: str
    skills: list[Any]
    tools: list[dict[str, Any]]


class TopicOut(CamelModel):
    id: uuid.UUID
    session_id: uuid.UUID
    title: str | None
    summary: str | None
    summary_source: Literal["llm", "fallback"] | None
    status: Literal["active", "closed"]
    memory_state: Literal["none", "promoted", "deprecated"]
    keep_in_memory: bool
    keep_in_memory_manually_set: bool
    deprecated: bool
    deprecated_manually_set: bool
    message_count: int
    created_at: datetime
    closed_at: datetime | None
    summarized_at: datetime | None
    memory_state_set_by: Literal["user", "agent", "summarizer"] | None


class SessionOut(CamelModel):
    id: uuid.UUID
    agent_id: str
    user_id: str
    org_id: uuid.UUID
    active_topic_id: uuid.UUID | None
    created_at: datetime


class SessionWithTopicsOut(SessionOut):
    topics: list[TopicOut]


class MessageOut(CamelModel):
    id: int
    topic_id: uuid.UUID
    role: str
    content: str
    tool_name: str | None
    tool_call_id: str | None
    created_at: datetime


class MessageListOut(CamelModel):
    messages: list[MessageOut]
    next_after_id: int | None


class PostedMessageOut(CamelModel):
    id: int
    topic_id: uuid.UUID
    created_at: datetime
    drift_evaluation_enqueued: bool


class HealthOut(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)


def dump(model: BaseModel) -> dict[str, Any]:
    """JSON-ready camelCase dict."""
    return model.model_dump(mode="json", by_alias=True)


# --- curation, tools, facts, memory ([2/6]) -------------------------------------------


class ToolPath(Input):
    sid: uuid.UUID
    name: str = Field(max_length=100)


class FactPath(Input):
    key: str = Field(min_length=1, max_length=200)


class ScopeQuery(CamelModel, Input):
    agent_id: ScopeId
    user_id: ScopeId


class MemoryStateIn(Body):
    state: Literal["none", "promoted", "deprecated"]


class ToolCallIn(Body):
    arguments: dict[str, Any]
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=200)


class ToolResultOut(CamelModel):
    ok: bool
    result: Any = None
    error: str | None = None
    tool_call_id: str


class ToolsOut(CamelModel):
    tools: list[dict[str, Any]]


class MemoryChangeOut(CamelModel):
    id: int
    actor: Literal["user", "agent", "summarizer"]
    action: str
    from_state: Literal["none", "promoted", "deprecated"]
    to_state: Literal["none", "promoted", "deprecated"]
    keep_in_memory_manually_set: bool
    deprecated_manually_set: bool
    created_at: datetime


class HistoryOut(CamelModel):
    changes: list[MemoryChangeOut]


class EvaluationOut(CamelModel):
    id: int
    trigger: str
    outcome: Literal["fork", "refresh", "skipped", "fallback"]
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    model: str | None
    error: str | None
    started_at: datetime
    finished_at: datetime


class EvaluationsOut(CamelModel):
    evaluations: list[EvaluationOut]


FactKey = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class FactsIn(RootModel[dict[FactKey, Any]]):
    """Entries to create or update, by key."""

    root: dict[FactKey, Any] = Field(min_length=1)

    _storable = field_validator("root", mode="before")(storable)


class FactsOut(CamelModel):
    facts: dict[str, Any]


class MemoryEntryOut(CamelModel):
    topic_id: uuid.UUID
    title: str
    summary: str | None
    deprecated: bool


class MemoryOut(CamelModel):
    entries: list[MemoryEntryOut]
    tokens: int
    truncated: bool
    dropped: int


# --- context ([3/6]) ----------------------------------------------------------------


class DriftResultOut(CamelModel):
    from_topic_id: uuid.UUID
    from_title: str
    to_topic_id: uuid.UUID
    to_title: str


class MemoryBlockOut(CamelModel):
    entries: list[MemoryEntryOut]
    tokens: int
    dropped: int


class StableOut(CamelModel):
    soul: str
    skills: list[Any]
    tools: list[dict[str, Any]]
    memory: MemoryBlockOut
    durable_facts: dict[str, Any]
    drift_result: DriftResultOut | None


class PriorTopicOut(CamelModel):
    topic_id: uuid.UUID
    title: str
    summary: str | None
    pending: bool


class SemiStableOut(CamelModel):
    notes: str | None
    prior_topics: list[PriorTopicOut]


class ThreadMessageOut(CamelModel):
    id: int
    role: str
    content: str
    tool_name: str | None
    tool_call_id: str | None


class VolatileOut(CamelModel):
    thread: list[ThreadMessageOut]
    tool_results: list[ThreadMessageOut]
    working_memory: dict[str, Any] | None


class LayersOut(CamelModel):
    stable: StableOut
    semi_stable: SemiStableOut
    volatile: VolatileOut


class ContextOut(CamelModel):
    layers: LayersOut
    messages: list[dict[str, Any]]
    tokens: dict[str, int]
    stable_prefix_hash: str


class WorkingMemoryIn(RootModel[dict[str, Any]]):
    """Any JSON object; the agent runtime's scratch state for this session."""

    _storable = field_validator("root", mode="before")(storable)


class WorkingMemoryOut(CamelModel):
    working_memory: dict[str, Any]


# --- triggers ([4/6]) ---------------------------------------------------------------


class EvaluateIn(Body):
    trigger: Literal["navigation", "visibility", "disconnect", "manual"]


class EvaluateOut(CamelModel):
    status: Literal["scheduled", "coalesced", "suppressed", "dropped"]


# --- console support ([5/6]) --------------------------------------------------------


class ScopeOut(CamelModel):
    agent_id: str
    user_id: str
    sessions: int
    last_activity_at: datetime


class ScopesOut(CamelModel):
    scopes: list[ScopeOut]


class SessionsOut(CamelModel):
    sessions: list[SessionOut]


class ActiveNotesOut(CamelModel):
    content: str
    updated_at: datetime


class ArchivedNotesOut(CamelModel):
    content: str
    archived_at: datetime | None


class TopicNotesOut(CamelModel):
    active: ActiveNotesOut | None
    archived: list[ArchivedNotesOut]


class UserPath(Input):
    agent_id: ScopeId
    user_id: ScopeId


class ErasedOut(CamelModel):
    erased: dict[str, int]
