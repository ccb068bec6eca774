"""benchmarks/RESULTS.md as a set of sections, each owned by the script that measures it.

A section is the text between ``<!-- section: NAME -->`` and ``<!-- /section: NAME -->``,
each marker on a line of its own. ``write_section`` replaces one section's text, or
appends the section at the end when the file has none of that name, and leaves every
other byte of the file as it was. A file whose markers do not pair up (one left open, a
closing one without its opening, one inside another, a name twice) is refused with
``MalformedResults`` naming the line, and nothing is written.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
MARKER = re.compile(r"^<!-- (/?)section: (\S*) -->$")


class MalformedResults(ValueError):
    """The results file's section markers do not pair up."""


def _spans(text: str, where: str) -> dict[str, tuple[int, int]]:
    """Each section's name and the character span from its opening marker's first
    character to the end of its closing marker's line (newline included, if any)."""
    spans: dict[str, tuple[int, int]] = {}
    open_name: str | None = None
    open_at = open_line = 0
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        found = MARKER.match(line.rstrip("\r\n"))
        if found is not None:
            closing, name = found.group(1) == "/", found.group(2)
            if not NAME.fullmatch(name):
                raise MalformedResults(f"{where}:{number}: section name {name!r} is not valid")
            if not closing:
                if open_name is not None:
                    raise MalformedResults(
                        f"{where}:{number}: section {name!r} opens inside section "
                        f"{open_name!r} (opened on line {open_line})"
                    )
                if name in spans:
                    raise MalformedResults(f"{where}:{number}: section {name!r} appears twice")
                open_name, open_at, open_line = name, offset, number
            else:
                if open_name != name:
                    raise MalformedResults(
                        f"{where}:{number}: section {name!r} closes but "
                        + ("none is open" if open_name is None else f"{open_name!r} is open")
                    )
                spans[name] = (open_at, offset + len(line))
                open_name = None
        elif "<!-- section:" in line or "<!-- /section:" in line:
            raise MalformedResults(
                f"{where}:{number}: a section marker must be a line of its own: {line.strip()!r}"
            )
        offset += len(line)
    if open_name is not None:
        raise MalformedResults(f"{where}:{open_line}: section {open_name!r} is never closed")
    return spans


def section_names(text: str, where: str = "RESULTS.md") -> list[str]:
    """The names of the sections in ``text``, in their order."""
    return list(_spans(text, where))


def read_section(text: str, name: str, where: str = "RESULTS.md") -> str | None:
    """The text inside section ``name`` (markers excluded), or None if it has none."""
    span = _spans(text, where).get(name)
    if span is None:
        return None
    block = text[span[0] : span[1]]
    return block.split("\n", 1)[1].rsplit("<!-- /section:", 1)[0]


def replace_section(text: str, name: str, markdown: str, where: str = "RESULTS.md") -> str:
    """``text`` with section ``name`` holding ``markdown``: in place if the section exists,
    else appended after a blank line. Nothing outside that section changes."""
    if not NAME.fullmatch(name):
        raise ValueError(f"section name {name!r}: use lowercase letters, digits and '-'")
    if MARKER.search(markdown) or "<!-- section:" in markdown or "<!-- /section:" in markdown:
        raise ValueError(f"section {name!r}: its markdown may not hold section markers")
    body = markdown if markdown.endswith("\n") else markdown + "\n"
    block = f"<!-- section: {name} -->\n{body}<!-- /section: {name} -->\n"
    span = _spans(text, where).get(name)
    if span is not None:
        start, end = span
        if end == len(text) and not text.endswith("\n"):
            block = block[:-1]
        return text[:start] + block + text[end:]
    if not text:
        return block
    lead = "\n" if text.endswith("\n") else "\n\n"
    return text + lead + block


def write_section(name: str, markdown: str, path: Path = RESULTS) -> None:
    """Replace (or append) section ``name`` of the results file at ``path``."""
    text = path.read_bytes().decode("utf-8") if path.exists() else ""
    path.write_bytes(replace_section(text, name, markdown, path.name).encode("utf-8"))


def run_header(title: str, command: str, facts: dict[str, str] | None = None) -> str:
    """A section's opening: its heading, the command that wrote it, when, and where."""
    lines = [
        f"## {title}",
        "",
        f"Written by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
    ]
    machine = {
        "Machine": f"{platform.system()} {platform.release()}, {_cores()}",
        "Python": sys.version.split()[0],
        **(facts or {}),
    }
    lines += [f"- {k}: {v}" for k, v in machine.items()]
    return "\n".join(lines) + "\n"


def _cores() -> str:
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores, load average {load} (1 / 5 / 15 min) when written"


def command_line(argv: list[str]) -> str:
    """The command as a reader would type it, without a password in a DSN."""
    shown = [re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:…@", a) for a in argv]
    return "python " + " ".join(shown)


def versions(*packages: str) -> str:
    """``name version`` of each installed package, for a run header."""
    from importlib import metadata

    found = []
    for package in packages:
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            found.append(f"{package} not installed")
    return ", ".join(found)
