"""The export format's line models (shared/portability/format.py): what parses, what not."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.domain.errors import Invalid
from shared.portability.format import Fact, Header, Message, Scope, dump_line, parse_line

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_a_line_round_trips_in_camel_case_with_utc_times() -> None:
    header = Header(
        exported_at=NOW.astimezone(timezone(timedelta(hours=2))),
        scope=Scope(agent_id="a", user_id=None),
    )
    line = dump_line(header)
    assert line == (
        '{"type":"header","format":"driftless.export","version":1,'
        '"exportedAt":"2026-01-02T03:04:05Z","scope":{"agentId":"a","userId":null}}'
    )
    assert parse_line(line) == header


def test_each_type_parses_to_its_model() -> None:
    message = Message(
        id=7,
        session_id=uuid.uuid4(),
        topic_id=uuid.uuid4(),
        role="tool",
        content="42",
        tool_name="calc",
        tool_call_id="c1",
        created_at=NOW,
    )
    fact = Fact(
        agent_id="a",
        user_id="u",
        key="city",
        value={"name": "Lyon"},
        valid_from=NOW,
        valid_to=None,
        changed_by="agent",
    )
    assert parse_line(dump_line(message)) == message
    assert parse_line(dump_line(fact).encode()) == fact


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"type":"header","version":2}', "unsupported export version 2"),
        ('{"type":"blob"}', "unknown line type 'blob'"),
        ("[1]", "not a JSON object"),
        ("{nope", "not JSON"),
        ('{"type":"fact","agentId":"a"}', "invalid fact line: userId: Field required"),
        (
            '{"type":"header","version":1,"exportedAt":"2026-01-02T03:04:05Z",'
            '"scope":{"agentId":null,"userId":null},"extra":1}',
            "extra: Extra inputs are not permitted",
        ),
        (
            '{"type":"header","version":1,"exportedAt":"2026-01-02T03:04:05",'
            '"scope":{"agentId":null,"userId":null}}',
            "exportedAt: Input should have timezone info",
        ),
    ],
)
def test_a_bad_line_is_invalid_and_says_why(text: str, says: str) -> None:
    with pytest.raises(Invalid, match=says):
        parse_line(text)
