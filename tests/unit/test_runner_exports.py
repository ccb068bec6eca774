"""cwstore.migrate and cwstore.roles load a driver only for the runner that is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cwstore.migrate
import cwstore.roles
from cwstore import _migrate_async, _migrate_sync

_LOADED = """
import sys
import cwstore.migrate, cwstore.roles
before = {d for d in ("asyncpg", "psycopg") if d in sys.modules}
getattr(sys.modules[sys.argv[1]], sys.argv[2])
after = {d for d in ("asyncpg", "psycopg") if d in sys.modules}
print(sorted(before), sorted(after))
"""


def _drivers_loaded(module: str, name: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, module, name],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("module", "name", "loaded"),
    [
        ("cwstore.migrate", "setup", "[] ['asyncpg']"),
        ("cwstore.migrate", "setup_sync", "[] ['psycopg']"),
        ("cwstore.migrate", "plan", "[] []"),
        ("cwstore.roles", "install_roles", "[] ['asyncpg']"),
        ("cwstore.roles", "add_tenant_member_sync", "[] ['psycopg']"),
    ],
)
def test_a_runner_loads_its_driver_only(module: str, name: str, loaded: str) -> None:
    assert _drivers_loaded(module, name) == loaded


@pytest.mark.parametrize("module", [cwstore.migrate, cwstore.roles])
def test_every_exported_name_is_the_runners(module: object) -> None:
    for name in module.__all__:  # type: ignore[attr-defined]
        value = getattr(module, name)
        base = name.removesuffix("_sync")
        if hasattr(_migrate_async, base) and callable(value):
            runner = _migrate_sync if name.endswith("_sync") else _migrate_async
            assert value is getattr(runner, base), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'apply_migration_sync'"):
        cwstore.migrate.apply_migration_sync  # noqa: B018
