"""Fixtures shared by every test directory: a real PostgreSQL, found or started lazily.

Nothing here runs until a test asks for a database fixture, so ``pytest tests/unit``
needs no server. Where the server comes from, first match wins:

1. ``CWSTORE_TEST_DSN``: a superuser (or CREATEDB) DSN, as a URL, of a server you run;
   used as is, its settings untouched.
2. A ``postgres:18`` container through testcontainers, when a Docker engine answers.
3. An embedded PostgreSQL 18 (:func:`cwstore.server.temporary_server`) in a temporary
   folder, with fsync off, stopped and deleted at the end of the session.

With ``CI=true`` a missing server fails the run instead of skipping.

Citus: with ``CWSTORE_TEST_CITUS_DSN`` (the coordinator DSN of a database with the citus
extension and its workers added, e.g. what ``ci/citus/cluster.sh createdb NAME`` prints),
the modules of ``tests/contract``, ``tests/citus`` and ``tests/langgraph_saver`` get a
database of their own on the cluster instead: created on every node, citus in it, the
workers added, migrated and distributed (``cwstore init --citus``), dropped on every node
after the module.

Databases: a template ``cwstore_tpl_<random>`` is created and migrated once per session;
``db_dsn`` clones it per test module (``CREATE DATABASE t_<uuid> TEMPLATE ...``) and
drops the clone ``WITH (FORCE)`` after the module. Cloning, not wiping, because the
store's own triggers forbid the DELETE and TRUNCATE a wipe would need, and race tests
need commits visible across connections. ``empty_db_dsn`` gives a function its own
empty database (for migration tests).
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import asyncpg
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from cwstore._sql import Migration
from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.migrate import apply_migrations_sync

_CONTAINER_IMAGE = "postgres:18"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _no_server(reason: str) -> NoReturn:
    if _in_ci():
        pytest.fail(f"no PostgreSQL for the tests (CI must not skip them): {reason}")
    pytest.skip(f"no PostgreSQL for the tests: {reason}")


def dsn_for(dsn: str, database: str) -> str:
    """Return ``dsn`` pointing at ``database``, as a URL both asyncpg and psycopg take."""
    params: dict[str, Any] = conninfo_to_dict(dsn)
    params["dbname"] = database
    user = quote(str(params.pop("user", "")), safe="")
    password = params.pop("password", None)
    auth = f"{user}:{quote(str(password), safe='')}@" if password else f"{user}@" if user else ""
    host = str(params.pop("host", ""))
    netloc = ""
    if host and not host.startswith("/") and "," not in host:
        netloc = f"[{host}]" if ":" in host else host
        if "port" in params:
            netloc += f":{params.pop('port')}"
    elif host:
        params["host"] = host
    path = quote(str(params.pop("dbname")), safe="")
    query = "&".join(f"{k}={quote(str(v), safe='/')}" for k, v in params.items())
    return f"postgresql://{auth}{netloc}/{path}" + (f"?{query}" if query else "")


def _create_database(admin_dsn: str, name: str, template: str | None = None) -> str:
    stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        stmt += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(stmt)
    return dsn_for(admin_dsn, name)


def _drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def _docker_answers() -> bool:
    """True when a Docker engine answers a ping within a couple of seconds."""
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextlib.contextmanager
def _container_server() -> Iterator[str]:
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers before 4.10
        from testcontainers.postgres import PostgresContainer

    from cwstore.server import FAST_UNSAFE_SETTINGS

    container = PostgresContainer(_CONTAINER_IMAGE, driver=None).with_command(
        " ".join(f"-c {k}={v}" for k, v in FAST_UNSAFE_SETTINGS.items())
    )
    with container:
        yield str(container.get_connection_url())


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """A superuser DSN for the test server's maintenance database."""
    env = os.environ.get("CWSTORE_TEST_DSN")
    if env:
        yield env
        return
    with contextlib.ExitStack() as stack:
        dsn: str | None = None
        errors: list[str] = []
        if _docker_answers():
            try:
                dsn = stack.enter_context(_container_server())
            except Exception as exc:
                errors.append(f"testcontainers: {exc}")
        if dsn is None:
            try:
                # Imported here so that a platform without the embedded server can
                # still run the unit tests (and use CWSTORE_TEST_DSN).
                from cwstore.server import temporary_server

                dsn = stack.enter_context(temporary_server())
            except Exception as exc:
                errors.append(f"embedded server: {exc}")
        if dsn is None:
            _no_server("; ".join(errors) or "none found")
        yield dsn


@pytest.fixture(scope="session")
def template_db(pg_admin_dsn: str) -> Iterator[str]:
    """Name of a database migrated to head, the template every ``db_dsn`` clones."""
    name = f"cwstore_tpl_{uuid.uuid4().hex[:12]}"
    dsn = _create_database(pg_admin_dsn, name)
    try:
        # The connection must be closed before anything clones the template.
        with psycopg.connect(dsn, autocommit=True) as conn:
            apply_migrations_sync(PsycopgConnection(conn))
        yield name
    finally:
        _drop_database(pg_admin_dsn, name)


_CITUS_DIRS: tuple[str, ...] = ("contract", "citus", "langgraph_saver")


def _citus_nodes(coordinator_dsn: str) -> list[str]:
    """Admin DSNs (database ``postgres``) of the coordinator and every worker."""
    with psycopg.connect(coordinator_dsn, autocommit=True) as conn:
        workers = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node"
            " WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport"
        ).fetchall()
    params: dict[str, Any] = conninfo_to_dict(coordinator_dsn)
    nodes = [dsn_for(coordinator_dsn, "postgres")]
    for host, port in workers:
        nodes.append(dsn_for(make_conninfo(**{**params, "host": host, "port": port}), "postgres"))
    return nodes


@contextlib.contextmanager
def citus_database(
    coordinator_dsn: str, files: Sequence[Migration] | None = None, *, distribute: bool = True
) -> Iterator[str]:
    """A new database on every node of the cluster of ``coordinator_dsn``, with citus,
    its workers added, migrated (through ``files`` only, when given) and distributed
    (unless ``distribute`` is false); dropped on every node afterwards."""
    from cwstore.migrate import distribute_sync

    nodes = _citus_nodes(coordinator_dsn)
    coord = conninfo_to_dict(coordinator_dsn)
    name = f"c_{uuid.uuid4().hex}"
    try:
        for node in nodes:
            _create_database(node, name)
            with psycopg.connect(dsn_for(node, name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION citus")
        dsn = dsn_for(coordinator_dsn, name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT citus_set_coordinator_host(%s, %s)",
                (str(coord.get("host") or "127.0.0.1"), int(coord.get("port") or 5432)),
            )
            for node in nodes[1:]:
                params = conninfo_to_dict(node)
                conn.execute(
                    "SELECT citus_add_node(%s, %s)", (str(params["host"]), int(str(params["port"])))
                )
            apply_migrations_sync(PsycopgConnection(conn), files)
            if distribute:
                distribute_sync(PsycopgConnection(conn))
        yield dsn
    finally:
        for node in nodes:
            _drop_database(node, name)


@pytest.fixture
def new_citus_database() -> Callable[..., ContextManager[str]]:
    """:func:`citus_database` on the cluster of ``CWSTORE_TEST_CITUS_DSN`` (skipped
    without one): ``with new_citus_database(files) as dsn`` gives a database migrated
    through ``files`` only (all when None) and distributed (``distribute=False``: not)."""
    citus = os.environ.get("CWSTORE_TEST_CITUS_DSN")
    if not citus:
        pytest.skip("CWSTORE_TEST_CITUS_DSN is not set: no Citus cluster for this test")
    return functools.partial(citus_database, citus)


@pytest.fixture(scope="module")
def db_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """DSN of a migrated database private to the test module (on the Citus cluster of
    ``CWSTORE_TEST_CITUS_DSN``, distributed, for the directories in ``_CITUS_DIRS``)."""
    citus = os.environ.get("CWSTORE_TEST_CITUS_DSN")
    if citus and Path(str(request.path)).parent.name in _CITUS_DIRS:
        with citus_database(citus) as dsn:
            yield dsn
        return
    pg_admin_dsn: str = request.getfixturevalue("pg_admin_dsn")
    template_db: str = request.getfixturevalue("template_db")
    name = f"t_{uuid.uuid4().hex}"
    dsn = _create_database(pg_admin_dsn, name, template=template_db)
    try:
        yield dsn
    finally:
        _drop_database(pg_admin_dsn, name)


@pytest.fixture
def empty_db_dsn(pg_admin_dsn: str) -> Iterator[str]:
    """DSN of a new empty database (from ``template0``) private to the test."""
    name = f"e_{uuid.uuid4().hex}"
    dsn = _create_database(pg_admin_dsn, name, template="template0")
    try:
        yield dsn
    finally:
        _drop_database(pg_admin_dsn, name)


@pytest.fixture
async def aconn(db_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """An asyncpg connection to the module's database."""
    conn = await asyncpg.connect(db_dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def conn(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A psycopg connection, in autocommit mode, to the module's database."""
    with psycopg.connect(db_dsn, autocommit=True) as c:
        yield c


@pytest.fixture(scope="module")
def login_role(db_dsn: str) -> Iterator[Any]:
    """``login_role(group, tenant) -> dsn``: a new login role in ``cwstore_writer`` or
    ``cwstore_reader`` and in ``tenant``, on the module's database (``cwstore init
    --roles`` done first). Its DSN logs in as it (trust auth, no password). The roles
    are dropped after the module."""
    from cwstore import roles

    made: list[str] = []
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        roles.install_roles_sync(PsycopgConnection(conn))

    def make(group: str, tenant: str) -> str:
        name = f"cw_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(name), sql.Identifier(group)
                )
            )
            made.append(name)
            roles.add_tenant_member_sync(PsycopgConnection(conn), tenant, name)
        params: dict[str, Any] = conninfo_to_dict(db_dsn)
        params["user"] = name
        params.pop("password", None)
        return dsn_for(make_conninfo(**params), str(params["dbname"]))

    try:
        yield make
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            for name in made:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (name,),
                )
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
