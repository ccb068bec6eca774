"""Find and read cwstore's SQL files: the schema, the migrations and the named queries.

The SQL is the repository's top-level ``sql/``, beside ``cwstore/``; the wheel carries
it inside the package, as ``cwstore/sql/``. :func:`sql_dir` holds the one rule: the
package's own ``sql/`` when it is there (an installed wheel, read through
:mod:`importlib.resources`, so a zip works too), else the ``sql/`` beside the package (a
checkout or an editable install).

``schema/NN_what.sql``
    The current schema, every object defined once, literally, in install order (the
    files' names sort in that order). This is what a reader opens to see the SQL as it
    runs; :func:`schema` returns the files in order.

``migrations/NNNN_short_description.sql``
    Deltas from one release's schema to the next: four digits, counted from 0001 with
    no gaps, words in lower case joined by underscores. ``0001_baseline.sql`` is a
    frozen copy of the schema as first released. :func:`migrations` returns them in
    order and refuses a gap, a duplicate number or a badly named ``.sql`` file (two
    branches adding the same number look like that). A test builds one database from
    ``schema/`` and one from the migrations and compares their catalogs.

``migrations/RELEASED``
    The migrations that have shipped, one ``<sha256>  <file name>`` line each (the
    format of ``sha256sum``): a released migration never changes, and a unit test holds
    each file to its recorded digest. :func:`released` reads it.

``queries.sql``
    Runtime queries, each under a marker line ``-- name: query_name``; a one-line
    ``--`` description may follow the marker. :func:`queries` returns
    ``{name: text}``.

``roles.sql``
    The roles script of ``cwstore init --roles`` (:func:`script`).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import LiteralString

from cwstore.errors import Error, MigrationError

__all__ = [
    "Migration",
    "SchemaFile",
    "migrations",
    "named_queries",
    "queries",
    "released",
    "schema",
    "script",
    "sql_dir",
]

_SCHEMA_FILE = re.compile(r"^\d{2}_[a-z0-9]+(?:_[a-z0-9]+)*\.sql$")
_MIGRATION_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9]+(?:_[a-z0-9]+)*)\.sql$")
_RELEASED_LINE = re.compile(r"^(?P<sha256>[0-9a-f]{64})  (?P<name>\S+)$")
_QUERY_MARKER = re.compile(r"^--\s*name:\s*(?P<name>\S+)\s*$")
_QUERY_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file.

    ``version`` is its number, ``name`` the words after it (``0001_baseline.sql`` gives
    ``1`` and ``"baseline"``), ``sql`` the whole file and ``sha256`` the hex digest of
    its bytes, recorded in ``cwstore.schema_migrations`` when it is applied.
    """

    version: int
    name: str
    sql: str
    sha256: str

    @property
    def filename(self) -> str:
        """The file's name, e.g. ``0001_baseline.sql``."""
        return f"{self.version:04d}_{self.name}.sql"

    @classmethod
    def from_text(cls, version: int, name: str, sql: str) -> Migration:
        """Build a migration from its text (tests use this for scratch migrations)."""
        return cls(version, name, sql, hashlib.sha256(sql.encode("utf-8")).hexdigest())


@dataclass(frozen=True, slots=True)
class SchemaFile:
    """One file of ``schema/``: its name (e.g. ``20_tables.sql``) and its text."""

    name: str
    sql: str


def sql_dir() -> Traversable:
    """Return the directory holding ``schema/``, ``migrations/`` and ``queries.sql``:
    ``sql/`` inside the package when it holds a ``schema/`` folder (a wheel puts the SQL
    there), else the ``sql/`` beside the package (a checkout, an editable install)."""
    inside = resources.files("cwstore") / "sql"
    if (inside / "schema").is_dir():
        return inside
    return Path(__file__).parent.parent / "sql"


def schema(directory: Traversable | None = None) -> list[SchemaFile]:
    """Read the schema files, in install order (by name).

    Parameters
    ----------
    directory:
        The SQL directory to read (``<directory>/schema/*.sql``); defaults to
        :func:`sql_dir`. A missing ``schema`` folder means no files.

    Returns
    -------
    list[SchemaFile]
        Sorted by name.

    Raises
    ------
    MigrationError
        A ``.sql`` file there is not named ``NN_what.sql`` (two digits, lower-case words
        joined by underscores), or two files share a number.
    """
    folder = (directory if directory is not None else sql_dir()) / "schema"
    if not folder.is_dir():
        return []
    found: list[SchemaFile] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql") or not entry.is_file():
            continue
        if _SCHEMA_FILE.match(entry.name) is None:
            raise MigrationError(
                f"schema file {entry.name!r} is not named NN_what.sql "
                "(two digits, lower-case words joined by underscores)"
            )
        found.append(SchemaFile(entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda f: f.name)
    for before, after in itertools.pairwise(found):
        if before.name[:2] == after.name[:2]:
            raise MigrationError(
                f"two schema files share number {before.name[:2]}: "
                f"{before.name!r} and {after.name!r}"
            )
    return found


def released(directory: Traversable | None = None) -> dict[str, str]:
    """Read ``migrations/RELEASED``: ``{file name: sha256}`` of every released migration.

    Lines are ``<sha256>  <file name>`` (as ``sha256sum`` writes them); blank lines and
    ``#`` comments are skipped. A missing file means nothing was released.

    Raises
    ------
    MigrationError
        A line is not a 64-digit lower-case hex digest, two spaces and a file name, or a
        file is listed twice.
    """
    path = (directory if directory is not None else sql_dir()) / "migrations" / "RELEASED"
    if not path.is_file():
        return {}
    result: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _RELEASED_LINE.match(line)
        if match is None:
            raise MigrationError(
                f"migrations/RELEASED line {number}: expected '<sha256>  <file name>', got {line!r}"
            )
        if match["name"] in result:
            raise MigrationError(f"migrations/RELEASED lists {match['name']!r} twice")
        result[match["name"]] = match["sha256"]
    return result


def migrations(directory: Traversable | None = None) -> list[Migration]:
    """Read every migration, in version order.

    Parameters
    ----------
    directory:
        The SQL directory to read (``<directory>/migrations/*.sql``); defaults to
        :func:`sql_dir`. A missing ``migrations`` folder means no migrations.

    Returns
    -------
    list[Migration]
        Sorted by version; the versions are exactly ``1 .. len(result)``.

    Raises
    ------
    MigrationError
        A ``.sql`` file is not named ``NNNN_short_description.sql``, two files share a
        number, or a number is missing (``version`` names the offending number).
    """
    folder = (directory if directory is not None else sql_dir()) / "migrations"
    if not folder.is_dir():
        return []
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql") or not entry.is_file():
            continue
        match = _MIGRATION_FILE.match(entry.name)
        if match is None:
            raise MigrationError(
                f"migration file {entry.name!r} is not named NNNN_short_description.sql "
                "(four digits, lower-case words joined by underscores)"
            )
        version = int(match["version"])
        if version in found:
            raise MigrationError(
                f"two migration files share number {version:04d}: "
                f"{found[version].filename!r} and {entry.name!r}",
                version,
            )
        data = entry.read_bytes()
        found[version] = Migration(
            version=version,
            name=match["name"],
            sql=data.decode("utf-8"),
            sha256=hashlib.sha256(data).hexdigest(),
        )
    ordered = [found[v] for v in sorted(found)]
    for expected, migration in enumerate(ordered, start=1):
        if migration.version != expected:
            raise MigrationError(
                f"migration {expected:04d} is missing: the files go on with "
                f"{migration.filename!r} (numbers start at 0001 and leave no gaps)",
                expected,
            )
    return ordered


def queries(directory: Traversable | None = None) -> dict[str, LiteralString]:
    """Read ``queries.sql`` into ``{name: sql}``.

    Each query runs from its ``-- name: query_name`` marker to the next marker; the
    text keeps the optional description comment and loses surrounding blank lines.
    Comment lines before the first marker are the file's header and are skipped.

    Parameters
    ----------
    directory:
        The SQL directory to read; defaults to :func:`sql_dir`.

    Returns
    -------
    dict[str, LiteralString]
        In file order; empty when ``queries.sql`` does not exist.

    Raises
    ------
    cwstore.errors.Error
        SQL before the first marker, a badly formed or repeated name, or an empty query.
    """
    path = (directory if directory is not None else sql_dir()) / "queries.sql"
    if not path.is_file():
        return {}
    result: dict[str, LiteralString] = {}
    name: str | None = None
    body: list[str] = []

    def finish() -> None:
        if name is None:
            if any(ln.strip() and not ln.lstrip().startswith("--") for ln in body):
                raise Error("queries.sql: text before the first '-- name:' marker")
            return
        text = "\n".join(body).strip()
        if not text:
            raise Error(f"queries.sql: query {name!r} is empty")
        # Typed LiteralString although read from a file: the file ships with the
        # package, so it is as trustworthy as a literal in the source, which is what
        # the drivers' LiteralString guard is about (caller input never gets here).
        result[name] = text

    for line in path.read_text(encoding="utf-8").splitlines():
        marker = _QUERY_MARKER.match(line)
        if marker is None:
            body.append(line)
            continue
        finish()
        name = marker["name"]
        if not _QUERY_NAME.match(name):
            raise Error(f"queries.sql: bad query name {name!r} (use lower_snake_case)")
        if name in result:
            raise Error(f"queries.sql: query {name!r} is defined twice")
        body = []
    finish()
    return result


def script(name: str) -> LiteralString:
    """The text of a SQL script in :func:`sql_dir` (e.g. ``roles.sql``).

    Raises :class:`~cwstore.errors.Error` when the file is missing.
    """
    path = sql_dir() / name
    if not path.is_file():
        raise Error(f"SQL script {name!r} is missing from {sql_dir()}")
    # Shipped with the package, like the schema: as trusted as a literal (mypy
    # treats LiteralString as str).
    return path.read_text(encoding="utf-8")


def named_queries(package: str) -> dict[str, LiteralString]:
    """The named queries of an integration: the ``queries.sql`` file of ``package`` (an
    importable package's name, e.g. ``"cwstore.langgraph"``), read as cwstore reads its
    own (``-- name: query_name`` markers; see :func:`queries`), through
    :mod:`importlib.resources`, so it works from a wheel.

    Raises :class:`cwstore.Error` for a badly formed file, :class:`ModuleNotFoundError`
    for a package that cannot be imported.
    """
    return queries(resources.files(package))
