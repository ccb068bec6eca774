"""libpq's connection strings, read as libpq reads them (pure, no driver).

:func:`parse_conninfo` takes both forms libpq takes and returns the settings in libpq's
order, as ``PQconninfoParse`` would (``fe-connect.c``):

* ``key=value`` strings: settings are separated by whitespace (space, tab, newline,
  vertical tab, form feed, carriage return; no other), whitespace may surround ``=``, a
  value is either unquoted (up to the next whitespace) or single-quoted (up to the next
  unescaped ``'``; the next setting may follow the closing quote at once), and in both a
  backslash makes the character after it literal (``\\'``, ``\\\\``, ``\\ ``).
* URIs, ``postgresql://[user[:password]@][host[:port][,...]][/dbname][?key=value&...]``
  (or ``postgres://``): every part percent-decoded, an IPv6 host in brackets,
  ``ssl=true`` as JDBC spells ``sslmode=require``.

In both, a later setting replaces an earlier one of the same key, and ``requiressl``
is the old spelling of ``sslmode``. :func:`format_conninfo` writes settings back as a
``key=value`` string (as psycopg's ``make_conninfo`` does).

The asyncpg adapter turns a ``key=value`` string into the URL asyncpg takes; the demo
shows a DSN without its password. Neither needs psycopg for it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from .errors import InputError

__all__ = ["KEYWORDS", "format_conninfo", "parse_conninfo"]

KEYWORDS: tuple[str, ...] = (
    "service",
    "user",
    "password",
    "passfile",
    "channel_binding",
    "connect_timeout",
    "dbname",
    "host",
    "hostaddr",
    "port",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "sslmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslcertmode",
    "sslpassword",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "require_auth",
    "min_protocol_version",
    "max_protocol_version",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "gssencmode",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "replication",
    "target_session_attrs",
    "load_balance_hosts",
    "scram_client_key",
    "scram_server_key",
    "oauth_issuer",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope",
    "sslkeylogfile",
)
"""The settings libpq 18 knows, in its order; any other key is refused, as libpq refuses it."""
_ORDER = {k: i for i, k in enumerate(KEYWORDS)}

_SPACE = frozenset(" \t\n\v\f\r")
_QUOTE = frozenset("'")
_URI_PREFIXES = ("postgresql://", "postgres://")


def parse_conninfo(conninfo: str) -> dict[str, str]:
    """The settings of a connection string (``key=value`` or a URI), in libpq's order.

    Raises :class:`InputError` naming what is wrong: a key without ``=`` after it, a
    quoted value never closed, a key libpq does not know, a URI's bad percent-encoding
    or IPv6 brackets, or a U+0000 character.
    """
    if "\0" in conninfo:
        raise InputError("a connection string cannot hold the character U+0000")
    found: dict[str, str] = {}
    prefix = next((p for p in _URI_PREFIXES if conninfo.startswith(p)), None)
    if prefix is None:
        _parse_pairs(conninfo, found)
    else:
        _parse_uri(conninfo, len(prefix), found)
        for key, value in found.items():
            try:
                value.encode()
            except UnicodeEncodeError:
                raise InputError(f"the URI's {key} is not UTF-8 once decoded") from None
    return {k: found[k] for k in sorted(found, key=_ORDER.__getitem__)}


def format_conninfo(settings: dict[str, str]) -> str:
    """``settings`` as a ``key=value`` string libpq reads back to the same settings: a
    value with whitespace single-quoted, ``\\`` and ``'`` escaped, an empty one ``''``."""
    return " ".join(f"{k}={_quoted(v)}" for k, v in settings.items())


def _quoted(value: str) -> str:
    if not value:
        return "''"
    value = re.sub(r"([\\'])", r"\\\1", value)
    return f"'{value}'" if re.search(r"\s", value) else value


def _parse_pairs(conninfo: str, out: dict[str, str]) -> None:
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


def _parse_uri(uri: str, start: int, out: dict[str, str]) -> None:
    """libpq's ``conninfo_uri_parse_options``: the URI's parts from ``uri[start:]``."""
    rest = uri[start:]
    at = re.match(r"[^@/]*@", rest)
    if at is not None:
        user, colon, password = at.group()[:-1].partition(":")
        if user:
            _store(out, "user", _decoded(user))
        if colon and password:
            _store(out, "password", _decoded(password))
        rest = rest[at.end() :]
    hosts: list[str] = []
    ports: list[str] = []
    while True:
        if rest.startswith("["):
            close = rest.find("]")
            if close < 0:
                raise InputError(f'an IPv6 host in brackets is not closed in the URI "{uri}"')
            if close == 1:
                raise InputError(f'an IPv6 host in brackets is empty in the URI "{uri}"')
            hosts.append(rest[1:close])
            rest = rest[close + 1 :]
            if rest and rest[0] not in ":/?,":
                raise InputError(f'"{rest[0]}" after an IPv6 host in the URI "{uri}"')
        else:
            n = _until(rest, ":/?,")
            hosts.append(rest[:n])
            rest = rest[n:]
        if rest.startswith(":"):
            n = _until(rest, "/?,")
            ports.append(rest[1:n])
            rest = rest[n:]
        if not rest.startswith(","):
            break
        rest = rest[1:]
        ports.append(",")
    host, port = ",".join(hosts), "".join(ports)
    if host:
        _store(out, "host", _decoded(host))
    if port:
        _store(out, "port", _decoded(port))
    path, question, query = rest.partition("?")
    if path[1:]:
        _store(out, "dbname", _decoded(path[1:]))
    if question:
        _parse_query(query, out)


def _until(text: str, stops: str) -> int:
    """The index of the first character of ``text`` in ``stops`` (its length if none)."""
    return next((i for i, c in enumerate(text) if c in stops), len(text))


def _parse_query(query: str, out: dict[str, str]) -> None:
    while query:
        pair, _, query = query.partition("&")
        key, equals, value = pair.partition("=")
        if not equals:
            raise InputError(f'a URI query parameter has no "=": "{pair}"')
        if "=" in value:
            raise InputError(f'a URI query parameter has a second "=": "{pair}"')
        key, value = _decoded(key), _decoded(value)
        if key == "ssl" and value == "true":
            key, value = "sslmode", "require"
        _store(out, key, value)


def _decoded(text: str) -> str:
    """``text`` percent-decoded, as libpq decodes a URI's parts."""
    if re.search(r"%(?![0-9A-Fa-f]{2})", text):
        raise InputError(f'a bad percent-encoding in the URI part "{text}"')
    if re.search(r"%00", text):
        raise InputError(f'"%00" in the URI part "{text}"')
    # Bytes that are not UTF-8 become lone surrogates, refused once the URI is read.
    return unquote(text, errors="surrogateescape")


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
