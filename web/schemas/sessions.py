"""Sessions, their messages and new topics, and the org's scopes (agent + user pairs)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import Field, model_validator

from web.schemas.common import Body, CamelModel, Input, OptionalBody, ScopeId
from web.schemas.topics import TopicOut

MAX_MESSAGE_CHARS = 100_000


class MessageQuery(CamelModel, Input):
    topic_id: uuid.UUID | None = None
    after_id: int | None = Field(default=None, ge=0)
    limit: int = Field(default=1000, ge=1, le=1000)


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


class SessionOut(CamelModel):
    id: uuid.UUID
    agent_id: str
    user_id: str
    org_id: uuid.UUID
    active_topic_id: uuid.UUID | None
    created_at: datetime


class SessionWithTopicsOut(SessionOut):
    topics: list[TopicOut]


class SessionsOut(CamelModel):
    sessions: list[SessionOut]


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


class ScopeOut(CamelModel):
    agent_id: str
    user_id: str
    sessions: int
    last_activity_at: datetime


class ScopesOut(CamelModel):
    scopes: list[ScopeOut]
