"""The docs list what the code has, and the README's shell blocks stay runnable.

Each test holds a list in a doc to where the code keeps it: a tool, a client method, a
route or a feature package added without its line in the docs fails here, naming it.
tests/e2e/test_readme_blocks.py runs the README's bash blocks; the checks here are the
ones that need no system (which blocks it may skip, and what a block may assume).
"""

from __future__ import annotations

import inspect
import ipaddress
import re
from pathlib import Path

import grimp

import shared
from driftless_client import AsyncClient, Client
from shared.infra.config import Settings
from shared.tools.definitions import BUILT_IN_TOOL_NAMES
from tests.readme_blocks import Block, bash_blocks, blocks
from web.mcp.tools import TOOLS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, ROOT / "client" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHARED = Path(shared.__file__).parent
NOT_FEATURES = {"infra", "domain"}
FEATURES = sorted(
    p.name
    for p in SHARED.iterdir()
    if p.is_dir() and (p / "__init__.py").exists() and p.name not in NOT_FEATURES
)

# Blocks that start the system (`make run`, `make test`), download data or load the machine
# for minutes; every other bash block runs in tests/e2e/test_readme_blocks.py.
MAX_NOT_RUN = 4


def _section(text: str, heading: str) -> str:
    """The text under `heading` (a whole heading line), up to the next heading of any level."""
    after = text.split(f"\n{heading}\n", 1)[1]
    return re.split(r"\n#{1,6} ", after, maxsplit=1)[0]


def _bullet(text: str, opening: str) -> str:
    """One `- **...**` bullet of a list, from its opening words to the next bullet."""
    after = text.split(f"- {opening}", 1)[1]
    return re.split(r"\n- |\n\n", after, maxsplit=1)[0]


# --- the README's shell blocks ---------------------------------------------------------


def test_the_readme_leaves_few_bash_blocks_to_the_reader_each_with_its_reason() -> None:
    not_run = [block for block in bash_blocks() if block.not_run is not None]
    assert len(not_run) <= MAX_NOT_RUN, [f"{b}: {b.not_run}" for b in not_run]
    assert all(len(str(block.not_run).split()) >= 2 for block in not_run), not_run
    assert len(bash_blocks()) - len(not_run) >= 5  # the README's examples run


def test_a_not_run_marker_always_stands_before_a_bash_block() -> None:
    """A marker that lost its block (an edit put text between them) would skip nothing."""
    markers = README.read_text().count("<!-- not run by tests:")
    assert markers == len([block for block in blocks() if block.not_run is not None])
    assert all(block.language == "bash" for block in blocks() if block.not_run is not None)


def _commands(block: Block) -> list[str]:
    """The block's lines as commands: comments dropped, continuation lines joined."""
    return block.code.replace("\\\n", " ").splitlines()


BARE_DRIFTLESS = re.compile(r"(?:^|[;&|(]|\$\()\s*driftless\s")


def test_shell_blocks_run_the_driftless_command_from_the_checkout() -> None:
    """`driftless` is not on a reader's PATH: `make run` installs it in .venv/bin/."""
    bare = [
        f"{path.relative_to(ROOT)}:{block.line}: {command.strip()}"
        for path in DOCS
        for block in blocks(path.read_text())
        if block.language == "bash"
        for command in _commands(block)
        if BARE_DRIFTLESS.search(command.split("#", 1)[0])
    ]
    assert not bare, bare


def _literal(host: str) -> bool:
    """An address written out (nothing to resolve), not a name."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def test_the_readme_blocks_that_run_need_no_dns_and_use_the_port_make_run_was_given() -> None:
    for block in bash_blocks():
        if block.not_run is not None:
            continue
        for host in re.findall(r"https?://(\[[^]]+\]|[^/:\s'\"]+)", block.code):
            assert host == "localhost" or _literal(host), f"{block}: {host} needs DNS"
        code = block.code.replace("${PORT:-8000}", "${PORT}")
        assert ":8000" not in code, f"{block} hard-codes the port: use ${{PORT:-8000}}"


# --- paths ----------------------------------------------------------------------------

PATH_IN_TEXT = re.compile(
    r"(?<![\w./$-])((?:\.\./)*(?:shared|web|worker|tests|bench|client|deploy|docs|\.ci)/[\w./-]*[\w/])"
)


def test_every_path_the_docs_name_is_in_the_checkout() -> None:
    """Paths relative to the repository root; one that starts with `../` is relative to the
    doc's folder and must still end inside the checkout (data lives elsewhere: say where)."""
    missing = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for named in PATH_IN_TEXT.findall(line):
                base = doc.parent if named.startswith("../") else ROOT
                target = (base / named).resolve()
                if not (target.is_relative_to(ROOT) and target.exists()):
                    missing.append(f"{doc.relative_to(ROOT)}:{number}: {named}")
    assert not missing, missing


# --- tools, client methods, routes ----------------------------------------------------


def test_every_mcp_tool_is_in_docs_mcp_md_and_the_readme() -> None:
    table = _section((ROOT / "docs" / "mcp.md").read_text(), "## Tools")
    mcp_bullet = _bullet(README.read_text(), "**MCP.**")
    for tool in TOOLS:
        assert f"| `{tool.name}` |" in table, f"docs/mcp.md's Tools table lacks {tool.name}"
        assert f"`{tool.name}`" in mcp_bullet, f"the README's MCP bullet lacks {tool.name}"


def test_every_built_in_tool_is_in_the_readme() -> None:
    tools_bullet = _bullet(README.read_text(), "**Tools, facts, notes**")
    assert [name for name in BUILT_IN_TOOL_NAMES if f"`{name}`" not in tools_bullet] == []


def _arguments(signature: str) -> list[str]:
    """`put_agent(agent_id, soul="", skills=())` -> ["agent_id", "soul", "skills"]."""
    inner = signature[signature.index("(") + 1 : signature.rindex(")")]
    names, depth, current = [], 0, ""
    for char in inner + ",":
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            if current.strip():
                names.append(current.split("=", 1)[0].strip())
            current = ""
        else:
            current += char
    return names


def _public_methods(cls: type) -> dict[str, list[str]]:
    return {
        name: list(inspect.signature(getattr(cls, name)).parameters)[1:]
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }


def test_every_client_method_is_in_client_readme_with_its_arguments() -> None:
    text = (ROOT / "client" / "README.md").read_text()
    rows = dict(
        (match.group(1), _arguments(match.group(0)[3:-3]))
        for match in re.finditer(r"^\| `(\w+)\(.*?\)` \|", text, flags=re.MULTILINE)
    )
    methods = {**_public_methods(AsyncClient), **_public_methods(Client)}
    assert [name for name in methods if f"`{name}(" not in text] == []
    wrong = {
        name: (args, methods.get(name)) for name, args in rows.items() if methods.get(name) != args
    }
    assert not wrong, f"client/README.md's table disagrees with the code: {wrong}"


def _route(method: str, path: str) -> tuple[str, str]:
    return method.upper(), re.sub(r"\{[^}]*\}", "{}", path.split("?", 1)[0])


def test_every_route_of_the_openapi_document_is_in_docs_api_md() -> None:
    from web.app import create_app

    # Building the app connects to nothing: unreachable servers are fine.
    settings = Settings(
        database_url="postgresql://nobody@127.0.0.1:1/none", redis_url="redis://127.0.0.1:1/0"
    )
    document = create_app(settings).test_client().get("/agents-api/openapi.json").json
    assert document is not None
    served = {_route(m, p) for p, operations in document["paths"].items() for m in operations}
    text = (ROOT / "docs" / "api.md").read_text()
    documented = {
        _route(m, p) for m, p in re.findall(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`\s]*)", text)
    }
    assert len(served) > 30
    assert sorted(served - documented) == []


# --- docs/architecture.md -------------------------------------------------------------


def _imports_between_features() -> set[tuple[str, str]]:
    graph = grimp.build_graph("shared")
    edges = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            a, b = importer.split(".")[1:2], imported.split(".")[1:2]
            if a and b and a != b and {a[0], b[0]} <= set(FEATURES):
                edges.add((a[0], b[0]))
    return edges


def _feature_graph_of_the_doc() -> tuple[set[tuple[str, str]], list[str], list[str]]:
    """The arrows of docs/architecture.md's graph, its sources and its leaves."""
    section = _section(
        (ROOT / "docs" / "architecture.md").read_text(),
        "## Feature packages and the imports between them",
    )
    (graph,) = [block.code for block in blocks(section) if block.language == ""]
    edges, sources, leaves = set(), [], []
    for line in graph.splitlines():
        if "(nothing of the features)" in line:
            leaves = [name.strip() for name in line.split("(")[0].split("·")]
        elif match := re.fullmatch(r"\s*(\w+) ─*▶ (.+)", line):
            sources.append(match.group(1))
            edges |= {(match.group(1), name.strip()) for name in match.group(2).split(",")}
    return edges, sources, leaves


def test_the_feature_graph_of_docs_architecture_md_is_the_import_graph() -> None:
    drawn, sources, leaves = _feature_graph_of_the_doc()
    assert sorted(sources + leaves) == FEATURES  # every feature package, once
    imported = _imports_between_features()
    assert sorted(imported - drawn) == [], "imports missing from docs/architecture.md's graph"
    assert sorted(drawn - imported) == [], "arrows in docs/architecture.md no import makes"


def test_docs_architecture_md_names_every_module_of_infra_and_domain() -> None:
    (picture, *_) = [b.code for b in blocks((ROOT / "docs" / "architecture.md").read_text())]
    for folder in NOT_FEATURES:
        for part in (SHARED / folder).iterdir():
            if part.name.startswith("__") or not (part.suffix == ".py" or part.is_dir()):
                continue
            assert re.search(rf"\b{part.stem}\b", picture), f"shared/{folder}/{part.name}"


def test_the_readme_is_a_front_door_43() -> None:
    """At most 400 lines, no internal issue tags ([2.3]), no benchmark tables: the rest
    lives in docs/ (the guide, the contract, the benchmarks)."""
    text = README.read_text()
    assert len(text.splitlines()) <= 400
    assert re.findall(r"\[\d\.\d+b?\]", text) == []
    assert "| benchmark |" not in text and "p50" not in text
    for doc in ("guide.md", "contract.md", "benchmarks.md", "deploy.md", "api.md"):
        assert f"(docs/{doc}" in text, f"the README does not link docs/{doc}"


def test_every_test_docs_rules_md_cites_exists_43() -> None:
    """docs/rules.md proves each rule by test names: a renamed test must not leave it
    citing one that is gone."""
    text = (ROOT / "docs" / "rules.md").read_text()
    cited = re.findall(r"`(tests/[\w/]+\.py)::(\w+)(?:\[[^\]]*\])?`", text)
    assert len(cited) > 100  # the reading finds the citations
    gone = [
        f"{path}::{name}"
        for path, name in cited
        if not (ROOT / path).exists() or not re.search(rf"def {name}\b", (ROOT / path).read_text())
    ]
    assert gone == []


def test_r8_names_every_built_in_tool_43() -> None:
    r8 = _section((ROOT / "docs" / "rules.md").read_text(), "### R8 Built-in tools")
    assert [name for name in BUILT_IN_TOOL_NAMES if f"`{name}`" not in r8] == []
