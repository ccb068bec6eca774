"""Every argument a store takes, checked once, before any driver sees it.

Both clients call these with what their caller gave, so bad input is refused alike, with
:class:`~cwstore.errors.InputError` naming the argument, and nothing is sent. No I/O
(``CWSTORE_POOLER`` is read from the environment).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from . import _jsontext
from .document import Vocabulary
from .errors import InputError

__all__ = [
    "MAX_GRAPH_NAME_BYTES",
    "POOLERS",
    "check_graph_name",
    "check_poll_interval",
    "check_pooler",
]

MAX_SEQUENCE = 2**63 - 1
"""The largest sequence number or length (an SQL ``bigint``)."""


def _is_count(value: object) -> bool:
    """An ``int`` (not a ``bool``) from 0 to :data:`MAX_SEQUENCE`."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEQUENCE


def check_after(after: object) -> int:
    """A ``tail`` start position: a sequence number from 0 to 2**63 - 1, else
    :class:`InputError`."""
    if not _is_count(after):
        raise InputError(f"after must be a sequence number from 0 to 2**63 - 1, got {after!r}")
    return cast(int, after)


def check_expected_length(expected_length: object) -> int | None:
    """``None`` or a graph length from 0 to 2**63 - 1, else :class:`InputError` (a
    ``1.5`` or ``False`` is refused, never rounded or read as 0)."""
    if expected_length is not None and not _is_count(expected_length):
        raise InputError(
            "expected_length must be None or an integer from 0 to 2**63 - 1, "
            f"got {expected_length!r}"
        )
    return cast(int | None, expected_length)


def check_incarnation(incarnation: object) -> int | None:
    """``None`` or a graph's life (:attr:`GraphInfo.incarnation`, from 0 to 2**63 - 1),
    else :class:`InputError`."""
    if incarnation is not None and not _is_count(incarnation):
        raise InputError(
            f"incarnation must be None or an integer from 0 to 2**63 - 1, got {incarnation!r}"
        )
    return cast(int | None, incarnation)


def check_key(key: object) -> str:
    """A resource or semantic key: a non-empty string PostgreSQL text can hold (no
    U+0000, no lone surrogate), else :class:`InputError`."""
    if not isinstance(key, str) or not key:
        raise InputError(f"a key must be a non-empty string, got {key!r}")
    if "\x00" in key or _jsontext._bad_string(key):
        raise InputError("a key cannot hold U+0000 or a lone surrogate")
    return key


def vocabulary_arg(vocab: Vocabulary) -> list[str] | None:
    """A vocabulary as ``begin_import`` takes it (``NULL`` = dynamic)."""
    return None if vocab.types is None else list(vocab.types)


MAX_GRAPH_NAME_BYTES = 2000
"""Longest graph name, in UTF-8 bytes (a btree index entry holds at most ~2,700)."""


def check_graph_name(graph: Any) -> str:
    """A graph name is any non-empty string PostgreSQL text can hold (no U+0000).

    Raises :class:`InputError` naming the problem; names are always bound parameters,
    so quotes, semicolons and any other character are just part of the name.
    """
    if not isinstance(graph, str) or not graph:
        raise InputError(f"a graph name must be a non-empty string, got {graph!r}")
    if "\x00" in graph or _jsontext._bad_string(graph):
        raise InputError("a graph name cannot hold U+0000 or a lone surrogate")
    if len(graph.encode("utf-8")) > MAX_GRAPH_NAME_BYTES:
        raise InputError(
            f"a graph name is at most {MAX_GRAPH_NAME_BYTES} bytes of UTF-8 "
            f"(this one has {len(graph.encode('utf-8'))})"
        )
    return graph


def as_of_args(as_of: int | datetime | None) -> tuple[int | None, datetime | None]:
    """``as_of`` checked and split into (sequence, time) query arguments, one of them set
    (or neither, for now). Raises :class:`InputError` for anything else."""
    if as_of is None:
        return None, None
    if isinstance(as_of, datetime):
        return None, check_time(as_of, "as_of")
    if not _is_count(as_of):
        raise InputError(
            f"as_of must be a sequence number from 0 to 2**63 - 1 or a datetime, got {as_of!r}"
        )
    return as_of, None


def check_time(t: datetime, name: str) -> datetime:
    """An aware datetime that has a UTC time (years 1 to 9999 there), as UTC, else
    :class:`InputError`: ``0001-01-01T00:00:00+14:00`` is before the first UTC time a
    :class:`~datetime.datetime` holds, and the drivers would fail on it each its own way."""
    if t.tzinfo is None or t.utcoffset() is None:
        raise InputError(f"{name} time needs a time zone (RFC 3339 with an offset)")
    try:
        return t.astimezone(UTC)
    except OverflowError:
        raise InputError(
            f"{name} time {t.isoformat()} is out of range (years 1 to 9999 in UTC)"
        ) from None


def check_read_length(graph: str, seq: int | None, length: int) -> None:
    """Refuse a read as of a sequence the graph does not hold yet."""
    if seq is not None and seq > length:
        raise InputError(f"graph {graph!r} has {length} nodes; cannot read as of {seq}")


def check_tenant(tenant: Any) -> str:
    """A tenant name: a non-empty string without NUL or lone surrogates, else
    :class:`InputError`."""
    if (
        not isinstance(tenant, str)
        or not tenant
        or "\x00" in tenant
        or _jsontext._bad_string(tenant)
    ):
        raise InputError(
            f"tenant must be a non-empty string without NUL or lone surrogates, got {tenant!r}"
        )
    return tenant


POOLERS = ("none", "transaction")
"""What may sit between a client and PostgreSQL: nothing (or a session-mode pooler),
or a transaction-mode pooler such as PgBouncer's ``pool_mode = transaction``."""


def check_pooler(pooler: str | None) -> bool:
    """Whether connections go through a transaction-mode pooler: ``pooler``, else the
    ``CWSTORE_POOLER`` environment variable, else ``"none"``.

    Raises :class:`InputError` for any other value than those of :data:`POOLERS`.
    """
    value = (os.environ.get("CWSTORE_POOLER") or "none") if pooler is None else pooler
    if value not in POOLERS:
        raise InputError(f"pooler must be one of {', '.join(POOLERS)}, got {value!r}")
    return value == "transaction"


def check_poll_interval(seconds: float) -> float:
    """A follower's polling interval: a positive number of seconds, at most an hour.

    Raises :class:`InputError` otherwise.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= 3600:
        raise InputError(f"poll_interval must be seconds in (0, 3600], got {seconds!r}")
    return float(seconds)


def tenant_settings(tenant: str | None) -> dict[str, str]:
    """The session settings for a store's ``tenant=`` option (``{}`` for none).

    Raises :class:`InputError` for a tenant that is not a non-empty string without NUL.
    """
    if tenant is None:
        return {}
    return {"cwstore.tenant": check_tenant(tenant)}


def timeout_settings(statement_timeout: float | None) -> dict[str, str]:
    """The session settings for a store's ``statement_timeout=`` option (seconds, more
    than 0 and at most a day; ``{}`` for none).

    Raises :class:`InputError` for anything else.
    """
    if statement_timeout is None:
        return {}
    if (
        isinstance(statement_timeout, bool)
        or not isinstance(statement_timeout, int | float)
        or not 0 < statement_timeout <= 86_400
    ):
        raise InputError(
            "statement_timeout is seconds, more than 0 and at most 86400, "
            f"got {statement_timeout!r}"
        )
    return {"statement_timeout": f"{max(1, round(statement_timeout * 1000))}ms"}


MAX_ERASE_BATCH = 2**31 - 1
"""The largest ``batch`` the erasure functions take (an SQL ``integer``)."""


MAX_REASON_BYTES = 1000
"""The longest reason an erasure records, in bytes of UTF-8 (the audit table's
``erasures_reason_check``, the same number)."""


def check_reason(reason: Any) -> str | None:
    """An erasure's reason: ``None`` or a string PostgreSQL text can hold, of at most
    :data:`MAX_REASON_BYTES`, else :class:`InputError`."""
    if reason is None:
        return None
    if not isinstance(reason, str) or "\x00" in reason or _jsontext._bad_string(reason):
        raise InputError(f"reason must be a string without NUL or lone surrogates, got {reason!r}")
    if len(reason.encode("utf-8")) > MAX_REASON_BYTES:
        raise InputError(
            f"a reason is at most {MAX_REASON_BYTES} bytes of UTF-8 "
            f"(this one has {len(reason.encode('utf-8'))})"
        )
    return reason


def check_batch(batch: Any) -> int:
    """A batch size of the erasure functions: an ``int`` from 1 to 2**31 - 1, else
    :class:`InputError`."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_ERASE_BATCH:
        raise InputError(f"batch must be an integer from 1 to {MAX_ERASE_BATCH}, got {batch!r}")
    return batch


MAX_RETENTION_GROUP_BYTES = 2000
"""The longest retention group, in bytes of UTF-8 (graphs_retention_group_check)."""


def check_retention_group(group: Any) -> str:
    """A retention group: a non-empty string without NUL or lone surrogates, of at most
    :data:`MAX_RETENTION_GROUP_BYTES` bytes of UTF-8, else :class:`InputError`."""
    if (
        not isinstance(group, str)
        or not group
        or "\x00" in group
        or _jsontext._bad_string(group)
        or len(group.encode("utf-8")) > MAX_RETENTION_GROUP_BYTES
    ):
        raise InputError(
            "retention_group must be a non-empty string without NUL or lone surrogates, "
            f"of at most {MAX_RETENTION_GROUP_BYTES} bytes of UTF-8, got {group!r:.200}"
        )
    return group


def check_idle(idle: Any) -> timedelta:
    """A retention age: a :class:`~datetime.timedelta` longer than zero, else
    :class:`InputError`."""
    if not isinstance(idle, timedelta) or idle <= timedelta(0):
        raise InputError(f"idle must be a timedelta longer than zero, got {idle!r}")
    return idle
