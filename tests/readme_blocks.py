"""The README's code blocks, as a reader finds them: each ```bash block with the heading
it sits under and, when the line before it is `<!-- not run by tests: REASON -->`, why the
tests leave it to the reader (it starts the system, downloads data, runs for minutes)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
NOT_RUN = re.compile(r"<!-- not run by tests: (?P<reason>.+?) -->")
# A ```python block whose first line is `# NAME.py`: the README asks the reader to save it
# as NAME.py, and a later bash block runs it.
SAVED_AS = re.compile(r"# (?P<name>[\w-]+\.py)\n")


@dataclass(frozen=True)
class Block:
    language: str
    heading: str
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the reason, when the README marks it

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.heading})"


def blocks(text: str | None = None) -> list[Block]:
    """Every fenced block of the README, in order."""
    lines = (README.read_text() if text is None else text).splitlines()
    found: list[Block] = []
    heading = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#") and not line.startswith("#!"):
            heading = line.lstrip("#").strip()
        elif line.startswith("```"):
            start = index
            index += 1
            body: list[str] = []
            while not lines[index].startswith("```"):
                body.append(lines[index])
                index += 1
            before = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
            marker = NOT_RUN.fullmatch(before.strip())
            found.append(
                Block(
                    language=line[3:].strip(),
                    heading=heading,
                    line=start + 1,
                    code="\n".join(body) + "\n",
                    not_run=marker.group("reason") if marker else None,
                )
            )
        index += 1
    return found


def bash_blocks() -> list[Block]:
    return [block for block in blocks() if block.language == "bash"]


def saved_files() -> dict[str, str]:
    """The python blocks the README asks to save, by the file name their first line gives."""
    return {
        match.group("name"): block.code
        for block in blocks()
        if block.language == "python" and (match := SAVED_AS.match(block.code))
    }
