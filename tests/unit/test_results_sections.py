"""benchmarks/_results.py: a script rewrites its own section of RESULTS.md and no other
byte of the file; a file whose markers do not pair up is refused, not guessed at."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_results_under_test", REPO / "benchmarks" / "_results.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


results = _load()

FILE = (
    "# results\n"
    "\n"
    "Intro, owned by nobody.\n"
    "\n"
    "<!-- section: run -->\n"
    "## Run\n"
    "| a | 1.0x |\n"
    "<!-- /section: run -->\n"
    "\n"
    "Between the sections.\n"
    "\n"
    "<!-- section: adk-sessions -->\n"
    "## ADK\n"
    "old numbers\n"
    "<!-- /section: adk-sessions -->\n"
    "\n"
    "Trailer.\n"
)


def test_replace_changes_only_that_section() -> None:
    out = results.replace_section(FILE, "run", "## Run\n| a | 2.0x |\n")
    assert out == FILE.replace("| a | 1.0x |", "| a | 2.0x |")
    again = results.replace_section(out, "adk-sessions", "## ADK\nnew numbers")
    assert again == out.replace("old numbers", "new numbers")


def test_replace_keeps_every_other_byte(tmp_path: Path) -> None:
    odd = FILE.replace("Intro", "Intro  with trailing spaces  \r").replace("Trailer.\n", "T")
    path = tmp_path / "RESULTS.md"
    path.write_bytes(odd.encode())
    results.write_section("adk-sessions", "x\n", path)
    text = path.read_bytes().decode()
    before, after = odd.split("<!-- section: adk-sessions -->")
    assert text.startswith(before + "<!-- section: adk-sessions -->\nx\n")
    assert text.endswith("<!-- /section: adk-sessions -->\n" + after.split(" -->\n", 1)[1])
    assert results.read_section(text, "adk-sessions") == "x\n"
    assert results.read_section(text, "run") == "## Run\n| a | 1.0x |\n"


def test_absent_section_is_appended() -> None:
    out = results.replace_section(FILE, "langgraph-saver", "## Savers\n")
    assert out == FILE + "\n<!-- section: langgraph-saver -->\n## Savers\n" + (
        "<!-- /section: langgraph-saver -->\n"
    )
    assert results.section_names(out) == ["run", "adk-sessions", "langgraph-saver"]
    assert results.replace_section("", "run", "x") == (
        "<!-- section: run -->\nx\n<!-- /section: run -->\n"
    )


def test_write_section_creates_and_rewrites_a_file(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    results.write_section("run", "one\n", path)
    results.write_section("other", "two\n", path)
    results.write_section("run", "three\n", path)
    assert results.section_names(path.read_text()) == ["run", "other"]
    assert results.read_section(path.read_text(), "run") == "three\n"
    assert results.read_section(path.read_text(), "other") == "two\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- section: run -->\nx\n", "RESULTS.md:1: section 'run' is never closed"),
        ("x\n<!-- /section: run -->\n", "RESULTS.md:2: section 'run' closes but none is open"),
        (
            "<!-- section: a -->\n<!-- section: b -->\n<!-- /section: b -->\n"
            "<!-- /section: a -->\n",
            "RESULTS.md:2: section 'b' opens inside section 'a'",
        ),
        (
            "<!-- section: a -->\n<!-- /section: b -->\n",
            "RESULTS.md:2: section 'b' closes but 'a' is open",
        ),
        (
            "<!-- section: a -->\n<!-- /section: a -->\n<!-- section: a -->\n"
            "<!-- /section: a -->\n",
            "RESULTS.md:3: section 'a' appears twice",
        ),
        ("text <!-- section: a --> more\n", "RESULTS.md:1: a section marker must be a line"),
        ("<!-- section: A B -->\n", "RESULTS.md:1: a section marker must be a line"),
        ("<!-- section: Run -->\n", "RESULTS.md:1: section name 'Run' is not valid"),
    ],
)
def test_a_malformed_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(results.MalformedResults) as caught:
        results.replace_section(text, "run", "new\n")
    assert str(caught.value).startswith(message)
    path = tmp_path / "RESULTS.md"
    path.write_text(text)
    with pytest.raises(results.MalformedResults):
        results.write_section("run", "new\n", path)
    assert path.read_text() == text


def test_bad_names_and_nested_markers_are_refused() -> None:
    with pytest.raises(ValueError, match="section name 'Run'"):
        results.replace_section(FILE, "Run", "x")
    with pytest.raises(ValueError, match="may not hold section markers"):
        results.replace_section(FILE, "run", "<!-- section: inner -->\n")


def test_the_repository_results_file_is_well_formed() -> None:
    text = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    names = results.section_names(text)
    owned = ["adk-sessions", "append-instructions", "append-memory", "erasure-space"]
    owned += ["langgraph-saver", "openai-agents-sessions", "run", "write-door-floor"]
    assert sorted(n for n in names if not n.endswith("-notes")) == owned


def test_a_password_in_a_dsn_is_not_written() -> None:
    shown = results.command_line(["x.py", "--dsn", "postgresql://u:secret@h:5432/db"])
    assert shown == "python x.py --dsn postgresql://u:…@h:5432/db"
