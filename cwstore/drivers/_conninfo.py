"""libpq's connection strings for the asyncpg client: read by libpq, honoured or refused.

A connection string (``key=value`` or a ``postgresql://`` URI) is read by libpq's own
parser (``PQconninfoParse``, through psycopg's :func:`~psycopg.conninfo.conninfo_to_dict`),
with the settings of a named ``service`` (``pg_service.conf``) and of libpq's
environment variables (``PGHOSTADDR``, ``PGREQUIREAUTH``, ...) under it, as libpq
resolves them. :func:`asyncpg_target` then hands asyncpg only what it honours as libpq
does, and refuses with :class:`InputError` any setting it would not: asyncpg sends a
query parameter it does not know to the server as a session setting, after
authenticating, so ``hostaddr`` would connect elsewhere and ``require_auth`` or
``channel_binding=require`` would be dropped after the password was sent.

The psycopg client hands the string to libpq itself and needs none of this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from ..errors import InputError

__all__ = ["AsyncpgTarget", "asyncpg_target", "parse_conninfo", "without_password"]

_NATIVE = frozenset(
    {
        "user",
        "password",
        "passfile",
        "dbname",
        "host",
        "port",
        "options",
        "application_name",
        "sslmode",
        "sslnegotiation",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslrootcert",
        "sslcrl",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "target_session_attrs",
        "krbsrvname",
        "gsslib",
    }
)
"""Settings asyncpg reads from its URL (or sends at startup) with libpq's meaning."""

_AS_DEFAULT: dict[str, frozenset[str]] = {
    "channel_binding": frozenset({"disable"}),
    "gssencmode": frozenset({"disable"}),
    "gssdelegation": frozenset({"0"}),
    "sslcertmode": frozenset({"allow"}),
    "sslsni": frozenset({"1"}),
    "load_balance_hosts": frozenset({"disable"}),
    "min_protocol_version": frozenset({"3.0"}),
    "max_protocol_version": frozenset({"3.0", "3.2", "latest"}),
    "sslcompression": frozenset({"0", "1"}),
}
"""Settings asyncpg has no way to express, accepted with the values that ask for what it
does anyway (no channel binding, no GSS encryption, a client certificate sent when one is
given, SNI sent, hosts tried in order, protocol 3.0; SSL compression, which OpenSSL no
longer offers, is never used) and refused with any other."""

_HELD_BACK = frozenset(
    {"fallback_application_name", "connect_timeout", "client_encoding", "service"}
)
"""Settings honoured by other means than the URL (see :func:`asyncpg_target`)."""

_FROM_ENVIRONMENT = frozenset({"application_name", "options", "connect_timeout", "client_encoding"})
"""Settings libpq reads from the environment and asyncpg does not; asyncpg reads the
environment variables of every other setting it honours itself."""

_UTF8 = frozenset({"utf8", "utf-8", "unicode"})


@dataclass(frozen=True)
class AsyncpgTarget:
    """What asyncpg is handed for a connection string: ``url`` (settings asyncpg reads
    as libpq does) and ``options``, keyword arguments of ``asyncpg.connect``."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)


def without_password(dsn: str) -> tuple[str, bool]:
    """``dsn`` to show, without its password (and whether one was left out); a string
    libpq refuses is shown as it is."""
    try:
        params = parse_conninfo(dsn)
    except InputError:
        return dsn, False
    if "password" not in params:
        return dsn, False
    params.pop("password")
    from psycopg.conninfo import make_conninfo

    return make_conninfo("", **params), True


def parse_conninfo(conninfo: str) -> dict[str, str]:
    """The settings of a connection string, as libpq's ``PQconninfoParse`` reads them
    (in libpq's order; neither a service file nor the environment is read).

    Raises :class:`InputError` with libpq's words for a string libpq refuses.
    """
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    if "\0" in conninfo:
        raise InputError("a connection string cannot hold the character U+0000")
    try:
        return {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
    except ProgrammingError as exc:
        raise InputError(f"the connection string is refused: {exc}") from None
    except UnicodeDecodeError:
        raise InputError("the connection string is not UTF-8 once decoded") from None


def asyncpg_target(dsn: str) -> AsyncpgTarget:
    """How asyncpg connects where libpq would connect for ``dsn``.

    Every setting in force (the string's, its service's, libpq's environment
    variables') is honoured as libpq honours it, or refused: the URL carries the
    settings asyncpg reads as libpq does; ``fallback_application_name`` becomes
    ``application_name`` when none is given; ``connect_timeout`` asyncpg's ``timeout``;
    ``client_encoding`` is accepted when it names UTF-8 (asyncpg's only one).

    Raises :class:`InputError` (before anything is sent) for a string libpq refuses, a
    service no service file defines, or a setting asyncpg cannot honour, naming it:
    ``hostaddr``, ``require_auth``, ``requirepeer``, ``sslcrldir``, ``sslkeylogfile``,
    ``replication``, the keepalive and ``tcp_user_timeout`` settings, the SCRAM keys and
    OAuth settings, and ``channel_binding``, ``gssencmode``, ``gssdelegation``,
    ``sslcertmode``, ``sslsni``, ``load_balance_hosts`` or a protocol version asking
    for more than asyncpg does.
    """
    given = parse_conninfo(dsn)
    service = given.get("service") or os.environ.get("PGSERVICE")
    from_service = _service_settings(service) if service else {}
    environment, names = _environment_settings()
    stated = from_service | given
    for key, value in (environment | stated).items():
        where = f"setting {key}" if key in stated else f"environment variable {names[key]}"
        _check(key, value, f"the connection {where}")
    url_settings = {k: v for k, v in stated.items() if k in _NATIVE and v}
    for key in [k for k in environment if k in _FROM_ENVIRONMENT and k not in stated]:
        stated[key] = environment[key]
        if key in _NATIVE and environment[key]:
            url_settings[key] = environment[key]
    if "application_name" not in url_settings and stated.get("fallback_application_name"):
        url_settings["application_name"] = stated["fallback_application_name"]
    return AsyncpgTarget(_url(url_settings), _connect_options(stated))


def _check(key: str, value: str, where: str) -> None:
    """Refuse ``key=value`` (``where``: the setting or environment variable holding it)
    unless asyncpg honours it as libpq does (an empty value is libpq's "not given")."""
    if not value:
        return
    if key == "client_encoding" and value.lower() not in _UTF8:
        raise InputError(f'{where}="{value}": the asyncpg client speaks UTF8 only')
    if key in _NATIVE or key in _HELD_BACK:
        return
    allowed = _AS_DEFAULT.get(key)
    if allowed is None or value not in allowed:
        accepted = "" if allowed is None else f" (it accepts only {', '.join(sorted(allowed))})"
        raise InputError(
            f'{where}="{value}" cannot be honoured by the asyncpg client{accepted}; asyncpg '
            "would send it to the server as a session setting after authenticating: "
            "remove it, or use the psycopg client (connect_sync)"
        )


def _environment_settings() -> tuple[dict[str, str], dict[str, str]]:
    """The settings libpq takes from environment variables (``PGHOSTADDR`` ...), and the
    variable of each."""
    from psycopg import pq

    found: dict[str, str] = {}
    names: dict[str, str] = {}
    for option in pq.Conninfo.get_defaults():
        if option.envvar is None:
            continue
        name = option.envvar.decode()
        value = os.environ.get(name)
        if value is not None:
            found[option.keyword.decode()] = value
            names[option.keyword.decode()] = name
    return found, names


def _service_settings(service: str) -> dict[str, str]:
    """The settings of ``service`` in the first service file defining it, as libpq
    looks: ``PGSERVICEFILE`` (else ``~/.pg_service.conf``), then ``pg_service.conf``
    in ``PGSYSCONFDIR``."""
    user_file = os.environ.get("PGSERVICEFILE") or str(Path.home() / ".pg_service.conf")
    files = [Path(user_file)]
    if os.environ.get("PGSYSCONFDIR"):
        files.append(Path(os.environ["PGSYSCONFDIR"]) / "pg_service.conf")
    for path in files:
        found = _service_section(path, service)
        if found is not None:
            return found
    raise InputError(f'no service file defines the service "{service}"')


def _service_section(path: Path, service: str) -> dict[str, str] | None:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"the service file {path} cannot be read: {exc}") from None
    section: dict[str, str] | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            if section is not None:
                return section
            section = {} if line == f"[{service}]" else None
            continue
        if section is None:
            continue
        key, equals, value = line.partition("=")
        if not equals:
            raise InputError(f'line {number} of the service file {path} has no "="')
        section[key.strip()] = value.strip()
    return section


def _url(settings: Mapping[str, str]) -> str:
    """``postgresql:///dbname?key=value...``: every setting a query parameter, an IPv6
    host in brackets (as asyncpg reads a host list)."""
    params = dict(settings)
    database = quote(params.pop("dbname", ""), safe="")
    if "host" in params:
        params["host"] = ",".join(_bracketed(h) for h in params["host"].split(","))
    return f"postgresql:///{database}?{urlencode(params, quote_via=quote)}"


def _bracketed(host: str) -> str:
    """``host`` as asyncpg reads it in a host list: an IPv6 address (or anything else
    holding ``:`` or opening with ``[``) in brackets, a socket directory as it is."""
    if host.startswith("/") or (":" not in host and not host.startswith("[")):
        return host
    if "]" in host:
        raise InputError(f'the host "{host}" cannot be handed to the asyncpg client')
    return f"[{host}]"


def _connect_options(settings: Mapping[str, str]) -> dict[str, Any]:
    """``connect_timeout`` as asyncpg's ``timeout`` (seconds; 0 or less: asyncpg's
    default of 60, where libpq waits without end)."""
    text = settings.get("connect_timeout")
    if not text:
        return {}
    try:
        seconds = int(text)
    except ValueError:
        raise InputError(f'connect_timeout "{text}" is not a whole number of seconds') from None
    return {} if seconds <= 0 else {"timeout": float(seconds)}
