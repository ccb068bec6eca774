"""Measured numbers live in benchmarks/RESULTS.md only: the README, docs/*.md and
benchmarks/README.md link to its sections instead of copying figures that go stale and
disagree. What is checked: no ratio (``0.13x``, ``45x``), fraction (``1/132``), latency
(``3.4 ms``, ``480 µs``) or rate (``2,587 nodes/s``) outside code blocks unless the
clause states a target or bound (``≤ 0.10x``, ``target 100x``, ``at most 2x``); no time
of day in UTC and no commit hash but the listed ones that name other projects' sources;
and every link into RESULTS.md names a heading that is there. Sizes (``4 MiB``) are not
checked: in these documents they are limits, not measurements."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FIGURE = re.compile(
    r"(?<![\w./])(?:\d[\d,]*(?:\.\d+)?\s?(?:[x\u00d7]|ms|µs|(?:nodes|rows|events)?/s)"
    r"|1/\d+)(?![\w/])"
)
BOUND = re.compile(
    r"(?:≤|≥|<=|>=|<|>|\btarget|\bat most|\bat least|\bwithin|\bbound|\bevery|\btimeout)"
    r"[^.;|]*$",
    re.IGNORECASE,
)
AIMED = re.compile(r"^\s*(?:aimed at|target)\b")
TIME_OF_DAY = re.compile(r"\b\d{1,2}:\d{2}\s?UTC\b")
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
# Commits of other projects a document names as a source (vendored or tested against).
FOREIGN_COMMITS = {
    "25da82b",  # message-db, vendored in benchmarks/message_db/
    "11cc0931",  # google/adk-python, whose session contract tests were run
    "7f7a44f",  # openai/openai-agents-python, whose session tests were run
}
LINK = re.compile(r"RESULTS\.md#([\w-]+)")


def _documents() -> list[Path]:
    return [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted(REPO.glob("docs/*.md"))]


def _prose(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with their numbers."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def quoted_figures(text: str) -> list[tuple[int, str]]:
    """Each measured figure in ``text`` that is not a target or a bound, by line number."""
    found = []
    for number, line in _prose(text):
        for match in FIGURE.finditer(line):
            if BOUND.search(line[max(0, match.start() - 40) : match.start()]):
                continue
            if AIMED.match(line[match.end() :]):
                continue
            found.append((number, match.group(0)))
        found += [(number, m.group(0)) for m in TIME_OF_DAY.finditer(line)]
        found += [
            (number, m.group(0))
            for m in HASH.finditer(line)
            if m.group(0) not in FOREIGN_COMMITS and "cw_" + m.group(0) not in line
        ]
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_documents_link_to_results_instead_of_quoting_figures() -> None:
    quoted = []
    for path in _documents():
        for number, figure in quoted_figures(path.read_text(encoding="utf-8")):
            quoted.append(f"{path.relative_to(REPO)}:{number}: {figure}")
    assert quoted == []


def test_every_link_into_results_names_a_heading() -> None:
    results = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    anchors = {slug(line.lstrip("#")) for line in results.splitlines() if line.startswith("#")}
    linked = []
    for path in [*_documents(), REPO / "CHANGELOG.md"]:
        for anchor in LINK.findall(path.read_text(encoding="utf-8")):
            linked.append(anchor)
            if anchor not in anchors:
                raise AssertionError(f"{path.relative_to(REPO)} links to a missing #{anchor}")
    assert len(linked) > 10  # the documents do link to the sections


def test_the_check_tells_a_figure_from_a_target() -> None:
    quoted = (
        "Closer: writing a step is 0.13x of LangGraph's time (target 0.10x), a\n"
        "projection 30x a Python fold, 0.008x (1/132), 3.42 ms, 2,587 nodes/s.\n"
        "Measured at 08:23 UTC on commit f87b621.\n"
    )
    assert quoted_figures(quoted) == [
        (1, "0.13x"),
        (2, "30x"),
        (2, "0.008x"),
        (2, "1/132"),
        (2, "3.42 ms"),
        (2, "2,587 nodes/s"),
        (3, "08:23 UTC"),
        (3, "f87b621"),
    ]
    targets = (
        "### 1. Import (target ≥ 0.50x)\n"
        "bytes ≤ 1/10, put p50 ≤ 1/2; p99 ≤ 30 ms at 16; at most 2x the baseline's;\n"
        "not the 1.0x aimed at; the tests sample `VmRSS` every 2 ms; a 4 MiB payload\n"
        "```\n3.42 ms inside a code block\n```\n"
        "node `cw_6d0d15b277b2afce06bbec28`\n"
    )
    assert quoted_figures(targets) == []


def test_slugs_are_githubs() -> None:
    assert slug(" Benchmark table: notes") == "benchmark-table-notes"
    assert slug("OpenAI Agents SDK sessions") == "openai-agents-sdk-sessions"
