"""The migration runner's functions, imported on first use.

:mod:`cwstore._migrate_async` (asyncpg) and :mod:`cwstore._migrate_sync` (psycopg,
generated from it) hold the same names; :mod:`cwstore.migrate` and :mod:`cwstore.roles`
export the first as they are and the second with ``_sync`` added. Each is imported only
when one of its names is first used, so a user of one driver never loads the other.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any


def runner_attribute(module: str, name: str) -> Any:
    """``name`` of ``module``'s ``__all__``: the async runner's function of that name, or,
    for a name ending in ``_sync``, the sync runner's without the suffix. Raises
    :class:`AttributeError` (as a module does) for any other name."""
    if name not in getattr(sys.modules[module], "__all__", ()):
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    base = name.removesuffix("_sync")
    runner = "cwstore._migrate_sync" if base != name else "cwstore._migrate_async"
    return getattr(importlib.import_module(runner), base)
