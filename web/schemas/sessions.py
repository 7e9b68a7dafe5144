"""Sessions, their messages and new topics, and the org's scopes (agent + user pairs)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, RootModel, model_validator

from shared.domain.limits import (
    MAX_BATCH_MESSAGES,
    MAX_MESSAGE_CHARS,
    MAX_TOPIC_TITLE_CHARS,
    MESSAGE_NAME_PATTERN,
)
from web.schemas.common import (
    Body,
    CamelModel,
    Input,
    OptionalBody,
    QueryFlag,
    ScopeId,
    body_form,
)
from web.schemas.context import ContextOut
from web.schemas.topics import TopicOut


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
    # The domain's rule (check_message_name), in the schema too so the OpenAPI document
    # shows it; the domain checks it for every writer (import, tools) as well.
    name: str | None = Field(
        default=None,
        pattern=MESSAGE_NAME_PATTERN,
        description="who spoke (OpenAI's `name`): ASCII letters, digits, '_' and '-',"
        " at most 64; user and assistant messages only",
    )
    tool_name: str | None = Field(default=None, min_length=1, max_length=200)
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _tool_fields_only_on_tool_messages(self) -> MessageIn:
        if self.role != "tool" and (self.tool_name or self.tool_call_id):
            raise ValueError("toolName and toolCallId are only allowed when role is 'tool'")
        return self


class MessageBatchIn(CamelModel):
    """Not an `Input`: each message checks its own fields for storable text, and checking
    the whole list first as well was a third of a 500-message batch's CPU."""

    model_config = ConfigDict(strict=True)

    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_BATCH_MESSAGES)


def _body_form(value: Any) -> str:
    return "batch" if isinstance(value, dict) and "messages" in value else "message"


class MessagesIn(
    RootModel[
        Annotated[
            Annotated[MessageIn, body_form("message")]
            | Annotated[MessageBatchIn, body_form("batch")],
            Discriminator(_body_form),
        ]
    ]
):
    """One message, or `{messages: [...]}`: a batch stored in order, all or nothing."""

    @property
    def batch(self) -> list[MessageIn]:
        return self.root.messages if isinstance(self.root, MessageBatchIn) else [self.root]

    @property
    def is_batch(self) -> bool:
        return isinstance(self.root, MessageBatchIn)


class PostMessagesQuery(CamelModel, Input):
    # True: the answer carries the context for the agent's next call (one round trip a turn).
    context: QueryFlag = False


class TopicIn(OptionalBody):
    title: str | None = Field(default=None, min_length=1, max_length=MAX_TOPIC_TITLE_CHARS)


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
    name: str | None
    tool_name: str | None
    tool_call_id: str | None
    created_at: datetime


class MessageListOut(CamelModel):
    messages: list[MessageOut]
    next_after_id: int | None


class StoredMessageOut(CamelModel):
    id: int
    topic_id: uuid.UUID
    created_at: datetime


class PostedMessageOut(StoredMessageOut):
    drift_evaluation_enqueued: bool
    context: ContextOut | None = Field(default=None, description="only with ?context=true")


class PostedBatchOut(CamelModel):
    messages: list[StoredMessageOut]
    drift_evaluation_enqueued: bool
    context: ContextOut | None = Field(default=None, description="only with ?context=true")


class PostedOut(RootModel[PostedMessageOut | PostedBatchOut]):
    """The answer of a single post, or of a batch."""


class ScopeOut(CamelModel):
    agent_id: str
    user_id: str
    sessions: int
    last_activity_at: datetime


class ScopesOut(CamelModel):
    scopes: list[ScopeOut]
