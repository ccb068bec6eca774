"""libpq's ``key=value`` connection strings, read as libpq reads them (pure, no driver).

:func:`parse_conninfo` follows ``conninfo_parse`` of libpq (``fe-connect.c``):
settings are separated by whitespace (space, tab, newline, vertical tab, form feed,
carriage return; no other), whitespace may surround ``=``, a value is either unquoted
(up to the next whitespace) or single-quoted (up to the next unescaped ``'``; the next
setting may follow the closing quote at once), and in both a backslash makes the
character after it literal (``\\'``, ``\\\\``, ``\\ ``). A later setting replaces an
earlier one of the same key; ``requiressl`` is the old spelling of ``sslmode``.

The asyncpg adapter turns such a string into the URL asyncpg takes; the demo shows its
parts. Neither needs psycopg for it.
"""

from __future__ import annotations

from .errors import InputError

__all__ = ["KEYWORDS", "parse_conninfo"]

KEYWORDS = frozenset(
    {
        "application_name",
        "channel_binding",
        "client_encoding",
        "connect_timeout",
        "dbname",
        "fallback_application_name",
        "gssdelegation",
        "gssencmode",
        "gsslib",
        "host",
        "hostaddr",
        "keepalives",
        "keepalives_count",
        "keepalives_idle",
        "keepalives_interval",
        "krbsrvname",
        "load_balance_hosts",
        "max_protocol_version",
        "min_protocol_version",
        "oauth_client_id",
        "oauth_client_secret",
        "oauth_issuer",
        "oauth_scope",
        "options",
        "passfile",
        "password",
        "port",
        "replication",
        "require_auth",
        "requirepeer",
        "scram_client_key",
        "scram_server_key",
        "service",
        "ssl_max_protocol_version",
        "ssl_min_protocol_version",
        "sslcert",
        "sslcertmode",
        "sslcompression",
        "sslcrl",
        "sslcrldir",
        "sslkey",
        "sslkeylogfile",
        "sslmode",
        "sslnegotiation",
        "sslpassword",
        "sslrootcert",
        "sslsni",
        "target_session_attrs",
        "tcp_user_timeout",
        "user",
    }
)
"""The settings libpq 18 knows; any other key is refused, as libpq refuses it."""

_SPACE = frozenset(" \t\n\v\f\r")
_QUOTE = frozenset("'")


def parse_conninfo(conninfo: str) -> dict[str, str]:
    """The settings of a ``key=value`` connection string, in the order first given.

    Raises :class:`InputError` naming what is wrong: a key without ``=`` after it, a
    quoted value never closed, a key libpq does not know, or a U+0000 character.
    """
    if "\0" in conninfo:
        raise InputError("a connection string cannot hold the character U+0000")
    out: dict[str, str] = {}
    i, end = 0, len(conninfo)
    while i < end:
        if conninfo[i] in _SPACE:
            i += 1
            continue
        start = i
        while i < end and conninfo[i] != "=" and conninfo[i] not in _SPACE:
            i += 1
        key = conninfo[start:i]
        while i < end and conninfo[i] in _SPACE:
            i += 1
        if i == end or conninfo[i] != "=":
            raise InputError(f'missing "=" after "{key}" in the connection string')
        i += 1
        while i < end and conninfo[i] in _SPACE:
            i += 1
        value, i = _value(conninfo, i)
        _store(out, key, value)
    return out


def _value(text: str, i: int) -> tuple[str, int]:
    """The value starting at ``text[i]`` and the index just past it."""
    end = len(text)
    quoted = i < end and text[i] == "'"
    if quoted:
        i += 1
    stop = _QUOTE if quoted else _SPACE
    chars: list[str] = []
    while True:
        if i == end:
            if quoted:
                raise InputError("a quoted value is not closed in the connection string")
            return "".join(chars), i
        c = text[i]
        if c == "\\":
            if i + 1 < end:
                chars.append(text[i + 1])
                i += 1
            i += 1
        elif c in stop:
            return "".join(chars), i + 1
        else:
            chars.append(c)
            i += 1


def _store(out: dict[str, str], key: str, value: str) -> None:
    if key == "requiressl":
        key, value = "sslmode", "require" if value.startswith("1") else "prefer"
    if key not in KEYWORDS:
        raise InputError(f'unknown connection setting "{key}" in the connection string')
    out[key] = value
