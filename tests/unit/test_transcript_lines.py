"""How one stored message becomes a line of the summary transcript (R7, R9), without a database.

`read_transcript` itself reads PostgreSQL and is tested in
tests/integration/evaluations/test_summarization.py; this pins the pure per-line part it relies on.
"""

from __future__ import annotations

from shared.llm.bounds import MAX_LINE_CHARS, line_size
from shared.sessions.models import Message
from shared.summaries.transcript import _line


def _message(content: str, role: str = "user", tool_name: str | None = None) -> Message:
    return Message(id=7, role=role, content=content, tool_name=tool_name)


def test_r9_a_message_that_fits_is_sent_word_for_word() -> None:
    content = "x" * MAX_LINE_CHARS
    line = _line(_message(content))
    assert (line.id, line.role, line.content, line.tool_name) == (7, "user", content, None)


def test_r9_one_pasted_document_is_cut_and_marked_so_it_cannot_crowd_out_the_rest() -> None:
    assert MAX_LINE_CHARS == 4_000
    content = "".join(f"{i:05d}" for i in range(20_000))  # 100,000 characters
    line = _line(_message(content))
    assert line.content == content[:MAX_LINE_CHARS] + " […]"
    # One character past the cap is cut the same way: the line costs what a cut line costs.
    one_more = _line(_message(content[: MAX_LINE_CHARS + 1]))
    assert one_more == line and line_size(one_more) == line_size(line)


def test_r9_the_cut_counts_characters_not_bytes() -> None:
    line = _line(_message("é" * MAX_LINE_CHARS))
    assert line.content == "é" * MAX_LINE_CHARS


def test_r7_a_tool_message_keeps_its_role_and_tool_name() -> None:
    line = _line(_message('{"op": "$set", "content": "EU first"}', "tool", "notes"))
    assert (line.role, line.tool_name) == ("tool", "notes")
    assert line.content == '{"op": "$set", "content": "EU first"}'


def test_r9_a_lines_size_is_its_content_plus_a_fixed_overhead() -> None:
    short, longer = _line(_message("a")), _line(_message("a" * 101))
    assert line_size(longer) - line_size(short) == 100
    assert line_size(short) > len(short.content)  # the id and role cost something too
