"""An export file written from the format's own line models, for the import tests and
the import bench: two sessions (promoted and closed topics, a fork, notes, curation)
and facts with their history, or any number of sessions of any size."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from shared.portability import format as fmt

# Ten days ago: past the idle sweep's horizon (7 days), so no trigger fires for an
# imported session, and within retention's 30 days, so the retention tests, whose purge
# sees every session of the suite's database, never find one that an import (the
# schemathesis run commits them) left idle.
T0 = (datetime.now(UTC) - timedelta(days=10)).replace(second=0, microsecond=0)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def session_lines(
    *,
    session_id: uuid.UUID,
    first_message_id: int,
    messages: int,
    agent: str,
    user: str,
    topic_ids: tuple[uuid.UUID, uuid.UUID] | None = None,
) -> list[fmt.LineModel]:
    """A session of a closed, promoted, summarized topic (the first half of the messages,
    with notes and a curation move) and an active one (the rest, with a fork into it)."""
    closed, active = topic_ids or (uuid.uuid4(), uuid.uuid4())
    half = max(1, messages // 2)
    ids = list(range(first_message_id, first_message_id + messages))
    lines: list[fmt.LineModel] = [
        fmt.Session(
            id=session_id, agent_id=agent, user_id=user, created_at=at(0),
            last_activity_at=at(messages),
        ),
        fmt.Topic(
            id=closed, session_id=session_id, status="closed", title="Database choice",
            summary="Chose PostgreSQL for the ledger.", summary_source="llm",
            summary_model="fake-model", summary_prompt_version="v3", keep_in_memory=True,
            keep_in_memory_manually_set=True, deprecated=False, deprecated_manually_set=False,
            memory_state_set_by="user", created_at=at(0), closed_at=at(half),
            summarized_at=at(half + 1), summarized_through_message_id=ids[half - 1],
        ),
        fmt.Topic(
            id=active, session_id=session_id, status="active", title="Deploy plan",
            summary=None, summary_source=None, summary_model=None, summary_prompt_version=None,
            keep_in_memory=False, keep_in_memory_manually_set=False, deprecated=False,
            deprecated_manually_set=False, memory_state_set_by=None, created_at=at(half),
            closed_at=None, summarized_at=None, summarized_through_message_id=None,
        ),
    ]  # fmt: skip
    if messages > half:
        lines.append(
            fmt.Fork(
                id=1, session_id=session_id, from_topic_id=closed, to_topic_id=active,
                from_title="Database choice", to_title="Deploy plan",
                first_message_id=ids[half], created_at=at(half),
            )
        )  # fmt: skip
    for n, message_id in enumerate(ids):
        role = ("user", "assistant", "tool")[n % 3]
        lines.append(
            fmt.Message(
                id=message_id, session_id=session_id, topic_id=closed if n < half else active,
                role=role, content=f"message {n}: we keep the ledger in PostgreSQL",
                tool_name="notes" if role == "tool" else None,
                tool_call_id=f"call-{n}" if role == "tool" else None, created_at=at(n),
            )
        )  # fmt: skip
    lines += [
        fmt.Note(topic_id=closed, content="decided: PostgreSQL", updated_at=at(1),
                 status="archived", archived_at=at(half)),
        fmt.Note(topic_id=active, content="deploy Friday", updated_at=at(half)),
        fmt.Curation(
            topic_id=closed, actor="user", action="set_state", from_state="none",
            to_state="promoted", keep_in_memory_manually_set=True,
            deprecated_manually_set=False, created_at=at(2),
        ),
    ]  # fmt: skip
    return lines


def export_lines(
    *, sessions: int = 2, messages: int = 6, agent: str = "planner", user: str = "ada"
) -> list[str]:
    """The lines of an export of `sessions` sessions of `messages` messages each."""
    lines: list[fmt.LineModel] = [
        fmt.Header(exported_at=at(0), scope=fmt.Scope(agent_id=agent, user_id=None)),
        fmt.Agent(
            agent_id=agent, soul="plans things", skills=["plan"], tools=[],
            created_at=at(0), updated_at=at(0),
        ),
    ]  # fmt: skip
    for n in range(sessions):
        lines += session_lines(
            session_id=uuid.uuid4(), first_message_id=1000 + n * (messages + 10),
            messages=messages, agent=agent, user=user,
        )  # fmt: skip
    lines += [
        fmt.Fact(agent_id=agent, user_id=user, key="tz", value="UTC", valid_from=at(0),
                 valid_to=at(5), changed_by="user"),
        fmt.Fact(agent_id=agent, user_id=user, key="tz", value="CET", valid_from=at(5),
                 valid_to=None, changed_by="agent"),
    ]  # fmt: skip
    return [fmt.dump_line(line) for line in lines]


def body(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()
