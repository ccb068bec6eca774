"""Every repository path a reader is sent to exists: the SQL's comments, the docs, the
READMEs and the package's docstrings cite files by their path, and a file renamed or
removed must take its citations along. (Migrations are history: they cite what existed
when they were written.)"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CITED = re.compile(
    r"\b((?:tests|cwstore|sql|docs|benchmarks|tools|ci|examples)/[A-Za-z0-9_./-]*"
    r"\.(?:py|sql|md|sh|mjs|json|js|html|css|toml|png))\b"
)


def _sources() -> list[Path]:
    found = [
        *REPO.glob("cwstore/**/*.py"),
        *REPO.glob("sql/*.sql"),
        *REPO.glob("sql/schema/*.sql"),
        *REPO.glob("cwstore/view/*.sql"),
        *REPO.glob("docs/*.md"),
        *REPO.glob("benchmarks/*.md"),
        REPO / "README.md",
        REPO / "CHANGELOG.md",
    ]
    return [p for p in found if p.is_file()]


def test_every_cited_path_exists() -> None:
    missing = []
    sources = _sources()
    assert len(sources) > 40  # the globs still find the files
    for source in sources:
        for cited in CITED.findall(source.read_text(encoding="utf-8")):
            if "NNNN" in cited:  # a pattern, not a file
                continue
            if not (REPO / cited).exists():
                missing.append(f"{source.relative_to(REPO)} cites {cited}")
    assert missing == []


def test_the_check_sees_a_missing_file(tmp_path: Path) -> None:
    text = "see tests/db/test_nowhere.py and docs/erasure.md"
    cited = CITED.findall(text)
    assert cited == ["tests/db/test_nowhere.py", "docs/erasure.md"]
    assert [c for c in cited if not (REPO / c).exists()] == ["tests/db/test_nowhere.py"]
