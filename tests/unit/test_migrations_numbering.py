"""The SQL files as shipped: migrations numbered 0001.. with no gap or duplicate (what two
branches adding the same number look like), and the loaders' refusals. No server.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cwstore import _sql
from cwstore.errors import Error, MigrationError


def _write(root: Path, names: list[str]) -> Path:
    (root / "migrations").mkdir(parents=True)
    for name in names:
        (root / "migrations" / name).write_text(f"-- {name}\nSELECT 1;\n")
    return root


def test_shipped_migrations_are_numbered_from_one_without_gaps() -> None:
    folder = _sql.sql_dir() / "migrations"
    files = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    assert files, f"no migrations in {folder}"
    for name in files:
        assert re.fullmatch(r"\d{4}_[a-z0-9]+(_[a-z0-9]+)*\.sql", name), name
    numbers = [int(name[:4]) for name in files]
    assert numbers == list(range(1, len(files) + 1)), files
    loaded = _sql.migrations()
    assert [m.filename for m in loaded] == files
    assert all(len(m.sha256) == 64 and m.sql.strip() for m in loaded)


def test_shipped_migrations_open_with_a_comment() -> None:
    # Each migration says what it does, why, and whether it is safe with live
    # writers, before its first statement.
    for m in _sql.migrations():
        assert m.sql.lstrip().startswith("--"), m.filename


def test_shipped_queries_parse() -> None:
    for name, text in _sql.queries().items():
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", name)
        assert text.strip()


def test_loader_reads_in_order(tmp_path: Path) -> None:
    root = _write(tmp_path, ["0002_b.sql", "0001_a.sql", "0003_c_d.sql", "README.md"])
    loaded = _sql.migrations(root)
    assert [(m.version, m.name) for m in loaded] == [(1, "a"), (2, "b"), (3, "c_d")]
    assert loaded[0] == _sql.Migration.from_text(1, "a", "-- 0001_a.sql\nSELECT 1;\n")


def test_no_migrations_folder_means_none(tmp_path: Path) -> None:
    assert _sql.migrations(tmp_path) == []
    assert _sql.queries(tmp_path) == {}


def test_gap_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError) as caught:
        _sql.migrations(_write(tmp_path, ["0001_a.sql", "0003_c.sql"]))
    assert caught.value.version == 2


def test_not_starting_at_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError) as caught:
        _sql.migrations(_write(tmp_path, ["0002_b.sql"]))
    assert caught.value.version == 1


def test_duplicate_number_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError) as caught:
        _sql.migrations(_write(tmp_path, ["0001_a.sql", "0002_b.sql", "0002_other.sql"]))
    assert caught.value.version == 2


@pytest.mark.parametrize("name", ["1_a.sql", "0001-a.sql", "0001_A.sql", "0001_.sql", "0001.sql"])
def test_badly_named_file_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(MigrationError):
        _sql.migrations(_write(tmp_path, [name]))


def test_queries_split_on_name_markers(tmp_path: Path) -> None:
    (tmp_path / "queries.sql").write_text(
        "-- The file's header comment.\n\n"
        "-- name: first_query\n-- Says what it does.\nSELECT $1;\n\n"
        "--name:second\nSELECT 2\nFROM x;\n"
    )
    assert _sql.queries(tmp_path) == {
        "first_query": "-- Says what it does.\nSELECT $1;",
        "second": "SELECT 2\nFROM x;",
    }


@pytest.mark.parametrize(
    "text",
    [
        "-- header\nSELECT 0;\n-- name: a\nSELECT 1;\n",  # SQL before the first marker
        "-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n",  # defined twice
        "-- name: a\n\n-- name: b\nSELECT 2;\n",  # empty query
        "-- name: Bad-Name\nSELECT 1;\n",  # not lower_snake_case
    ],
)
def test_bad_queries_file_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "queries.sql").write_text(text)
    with pytest.raises(Error):
        _sql.queries(tmp_path)
