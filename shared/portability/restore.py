"""Writing one exported session into an org, inside the caller's transaction.

Ids are new and every reference is kept. A session's and a topic's new id is a uuid5 of
the target org and the source id (`new_id`): importing the same file again finds the
session and skips it, with no table of what was imported. A message takes the next id
of the service's one sequence, allocated in file order (the file lists a session's
messages in id order), so drift's "ids increase in posting order" holds for imported
messages too; the source-to-new map lives in memory for the session's references.

The counters the message post keeps in the same transaction (shared/sessions/posting.py,
`append_messages`) are recomputed from the messages written, never read from the file:
a topic's message_count (user + assistant), tool_message_count and last_message_id.
The search vectors are generated columns: PostgreSQL fills them on insert.
"""

from __future__ import annotations

import bisect
import uuid
from dataclasses import dataclass, field

from sqlalchemy import insert, select, text

from shared.curation.models import ACTORS, MemoryChange
from shared.domain.errors import Invalid
from shared.domain.limits import (
    MAX_SCOPE_ID_CHARS,
    check_message_content,
    check_message_name,
    check_notes,
    check_summary,
    check_title,
)
from shared.infra.db.uow import UnitOfWork
from shared.memory.scope import Scope
from shared.memory.versions import memory_changed
from shared.notes.models import NotesDocument
from shared.portability import format as fmt
from shared.portability.message_rows import copy_messages
from shared.sessions.models import ChatSession
from shared.topics.models import Fork, Topic

# The portability namespace: fixed forever, or a re-import would not find its sessions.
NAMESPACE = uuid.UUID("6f1c3f0e-3a4b-5d2e-9c61-0d7a2b8e4f10")
# Messages per INSERT: a statement well inside the web's statement timeout.
MESSAGE_BATCH = 5_000


def new_id(org_id: uuid.UUID, source: uuid.UUID | str) -> uuid.UUID:
    """The id a source session or topic gets in `org_id`: the same on every import."""
    return uuid.uuid5(NAMESPACE, f"{org_id}:{source}")


def session_exists(*, uow: UnitOfWork, session_id: uuid.UUID) -> bool:
    found = uow.session.scalar(select(ChatSession.id).where(ChatSession.id == session_id))
    return found is not None


@dataclass
class _TopicCounts:
    counted: int = 0  # user + assistant (R12, R26)
    tools: int = 0
    # (source id, new id) in file order: increasing on both sides.
    source_ids: list[int] = field(default_factory=list)
    new_ids: list[int] = field(default_factory=list)


@dataclass
class SessionRestore:
    """One session's rows, written as its lines arrive; `finish` settles the references
    that point forward (counters, summary watermarks, forks)."""

    uow: UnitOfWork
    org_id: uuid.UUID
    line: fmt.Session
    topics: dict[uuid.UUID, _TopicCounts] = field(default_factory=dict)
    topic_lines: dict[uuid.UUID, fmt.Topic] = field(default_factory=dict)
    topic_ids: dict[uuid.UUID, str] = field(default_factory=dict)  # source -> new, as text
    active_notes: set[uuid.UUID] = field(default_factory=set)
    forks: list[fmt.Fork] = field(default_factory=list)
    pending: list[fmt.Message] = field(default_factory=list)
    last_source_message: int = 0
    messages: int = 0
    in_memory: bool = False

    @property
    def id(self) -> uuid.UUID:
        return new_id(self.org_id, self.line.id)

    def start(self) -> None:
        self.uow.session.execute(
            insert(ChatSession).values(
                id=self.id,
                org_id=self.org_id,
                agent_id=self.line.agent_id,
                user_id=self.line.user_id,
                created_at=self.line.created_at,
                last_activity_at=self.line.last_activity_at,
            )
        )

    def _own_topic(self, topic_id: uuid.UUID, what: str) -> _TopicCounts:
        counts = self.topics.get(topic_id)
        if counts is None:
            raise Invalid(f"{what} {topic_id} is not a topic listed before it in this session")
        return counts

    def _own_session(self, session_id: uuid.UUID) -> None:
        if session_id != self.line.id:
            raise Invalid(f"sessionId {session_id} is not the session {self.line.id} it follows")

    def topic(self, line: fmt.Topic) -> None:
        self._own_session(line.session_id)
        if line.id in self.topics:
            raise Invalid(f"topic {line.id} is listed twice")
        if line.status == "active" and any(t.status == "active" for t in self.topic_lines.values()):
            raise Invalid("a second active topic in the session (R4: exactly one)")
        if line.memory_state_set_by not in (None, *ACTORS):
            raise Invalid(f"memoryStateSetBy: one of {', '.join(ACTORS)}, or null")
        check_title(line.title)
        check_summary(line.summary)
        if line.summary_model is not None and len(line.summary_model) > MAX_SCOPE_ID_CHARS:
            raise Invalid(f"summaryModel: longer than {MAX_SCOPE_ID_CHARS} characters")
        topic_id = new_id(self.org_id, line.id)
        self.topics[line.id] = _TopicCounts()
        self.topic_ids[line.id] = str(topic_id)
        self.topic_lines[line.id] = line
        self.in_memory |= line.keep_in_memory or line.deprecated
        self.uow.session.execute(
            insert(Topic).values(
                id=topic_id,
                session_id=self.id,
                status=line.status,
                title=line.title,
                summary=line.summary,
                summary_source=line.summary_source,
                summary_model=line.summary_model,
                summary_prompt_version=line.summary_prompt_version,
                keep_in_memory=line.keep_in_memory,
                keep_in_memory_manually_set=line.keep_in_memory_manually_set,
                deprecated=line.deprecated,
                deprecated_manually_set=line.deprecated_manually_set,
                memory_state_set_by=line.memory_state_set_by,
                created_at=line.created_at,
                closed_at=line.closed_at,
                summarized_at=line.summarized_at,
            )
        )

    def message(self, line: fmt.Message) -> None:
        self._own_session(line.session_id)
        self._own_topic(line.topic_id, "topicId")
        if line.id <= self.last_source_message:
            raise Invalid(f"message {line.id} is out of id order, after {self.last_source_message}")
        if line.role != "tool" and (line.tool_name or line.tool_call_id):
            raise Invalid("toolName and toolCallId are only allowed when role is 'tool'")
        check_message_content(line.content)
        check_message_name(line.name, role=line.role)
        self.last_source_message = line.id
        self.pending.append(line)
        if len(self.pending) >= MESSAGE_BATCH:
            self.flush_messages()

    def fork(self, line: fmt.Fork) -> None:
        self._own_session(line.session_id)
        self._own_topic(line.from_topic_id, "fromTopicId")
        self._own_topic(line.to_topic_id, "toTopicId")
        check_title(line.from_title, field="fromTitle")
        check_title(line.to_title, field="toTitle")
        self.forks.append(line)  # its message boundary is mapped once the messages are in

    def note(self, line: fmt.Note) -> None:
        self._own_topic(line.topic_id, "topicId")
        check_notes(line.content)  # archived ones too: the notes tool reads them back
        if line.status == "active":
            if line.topic_id in self.active_notes:
                raise Invalid(f"a second active notes document of topic {line.topic_id} (R23)")
            self.active_notes.add(line.topic_id)
        self.uow.session.execute(
            insert(NotesDocument).values(
                topic_id=new_id(self.org_id, line.topic_id),
                content=line.content,
                status=line.status,
                created_at=line.created_at or line.updated_at,
                updated_at=line.updated_at,
                archived_at=line.archived_at,
            )
        )

    def curation(self, line: fmt.Curation) -> None:
        self._own_topic(line.topic_id, "topicId")
        self.uow.session.execute(
            insert(MemoryChange).values(
                topic_id=new_id(self.org_id, line.topic_id),
                actor=line.actor,
                action=line.action,
                from_state=line.from_state,
                to_state=line.to_state,
                keep_in_memory_manually_set=line.keep_in_memory_manually_set,
                deprecated_manually_set=line.deprecated_manually_set,
                created_at=line.created_at,
            )
        )

    def flush_messages(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        topic = self.topic_ids
        rows = [
            (
                topic[m.topic_id],
                m.role,
                m.content,
                m.name,
                m.tool_name,
                m.tool_call_id,
                m.created_at,
            )
            for m in batch
        ]
        ids = copy_messages(uow=self.uow, session_id=self.id, rows=rows)
        for message, stored in zip(batch, ids, strict=True):
            counts = self.topics[message.topic_id]
            if message.role == "tool":
                counts.tools += 1
            else:
                counts.counted += 1
            counts.source_ids.append(message.id)
            counts.new_ids.append(stored)
        self.messages += len(batch)

    def finish(self) -> None:
        """Counters, watermarks and forks, once every message of the session is in."""
        self.flush_messages()
        if not any(t.status == "active" for t in self.topic_lines.values()):
            raise Invalid(f"session {self.line.id} has no active topic (R4: exactly one)")
        for source_id, counts in self.topics.items():
            line = self.topic_lines[source_id]
            self.uow.session.execute(
                text(
                    "UPDATE topics SET message_count = :counted, tool_message_count = :tools,"
                    " last_message_id = :last, summarized_through_id = :through WHERE id = :id"
                ),
                {
                    "counted": counts.counted,
                    "tools": counts.tools,
                    "last": counts.new_ids[-1] if counts.new_ids else None,
                    "through": _through(counts, line.summarized_through_message_id),
                    "id": new_id(self.org_id, source_id),
                },
            )
        for fork in self.forks:
            self.uow.session.execute(
                insert(Fork).values(
                    session_id=self.id,
                    from_topic_id=new_id(self.org_id, fork.from_topic_id),
                    to_topic_id=new_id(self.org_id, fork.to_topic_id),
                    from_title=fork.from_title,
                    to_title=fork.to_title,
                    first_message_id=self._boundary(fork.first_message_id),
                    created_at=fork.created_at,
                )
            )
        if self.in_memory:  # promoted or deprecated topics: the scope's block changes
            of = self.line
            scope = Scope(org_id=self.org_id, agent_id=of.agent_id, user_id=of.user_id)
            memory_changed(uow=self.uow, scope=scope)

    def _boundary(self, source_id: int) -> int:
        """A fork's first message, new: the first message at or after it in the session
        (retention may have purged the very one), 0 when none is left."""
        # Each topic's ids are in file order already: its first at or after, by bisection,
        # and the earliest of those (not a sort of the session's every message).
        found = []
        for counts in self.topics.values():
            at = bisect.bisect_left(counts.source_ids, source_id)
            if at < len(counts.source_ids):
                found.append((counts.source_ids[at], counts.new_ids[at]))
        return min(found)[1] if found else 0


def _through(counts: _TopicCounts, source_id: int | None) -> int | None:
    """The summary's watermark, new: the topic's last message at or before the source's
    watermark. None when no such message is in the file (retention purged them: the
    topic then has no messages either, and nothing to summarize)."""
    if source_id is None:
        return None
    at = bisect.bisect_right(counts.source_ids, source_id)
    return counts.new_ids[at - 1] if at else None
