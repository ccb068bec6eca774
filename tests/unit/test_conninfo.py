"""The asyncpg client reads a connection string (``key=value`` or URI) with libpq's own
parser and hands asyncpg exactly what libpq would use, or refuses it: psycopg's
``conninfo_to_dict`` (``PQconninfoParse``) is the oracle, over chosen and generated
strings, refusals included, and every setting asyncpg cannot honour is refused wherever
it comes from (the string, a service file, a ``PG*`` environment variable)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import ProgrammingError, pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from cwstore import InputError
from cwstore.drivers._conninfo import asyncpg_target, parse_conninfo, without_password

_NATIVE = {
    "user", "password", "passfile", "dbname", "host", "port", "options", "application_name",
    "sslmode", "sslnegotiation", "sslcert", "sslkey", "sslpassword", "sslrootcert", "sslcrl",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "target_session_attrs",
    "krbsrvname", "gsslib",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _no_libpq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in pq.Conninfo.get_defaults():
        if option.envvar is not None:
            monkeypatch.delenv(option.envvar.decode(), raising=False)
    monkeypatch.setenv("PGSERVICEFILE", "/nonexistent/pg_service.conf")
    monkeypatch.delenv("PGSYSCONFDIR", raising=False)


def _libpq(conninfo: str) -> dict[str, str] | None:
    """libpq's settings for ``conninfo``, or None when libpq refuses it."""
    try:
        return {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
    except (ProgrammingError, UnicodeDecodeError):
        return None


def _unbracketed(host: str) -> str:
    return ",".join(
        h[1:-1] if h.startswith("[") and h.endswith("]") else h for h in host.split(",")
    )


def _handed_to_asyncpg(conninfo: str) -> dict[str, str] | None:
    """The settings in the URL the asyncpg client hands over (read back by libpq, an
    IPv6 host unbracketed), or None when the string is refused."""
    try:
        url = asyncpg_target(conninfo).url
    except InputError:
        return None
    back = conninfo_to_dict(url)
    if "host" in back:
        back["host"] = _unbracketed(str(back["host"]))
    return {k: str(v) for k, v in back.items() if v}


def _unlisted_host(settings: dict[str, str]) -> bool:
    """A host asyncpg's host list cannot hold: one that is bracketed there (it holds
    ``:`` or opens with ``[``) and holds a ``]`` of its own."""
    return any(
        (":" in h or h.startswith("[")) and "]" in h and not h.startswith("/")
        for h in settings.get("host", "").split(",")
    )


def _agrees_with_libpq(conninfo: str) -> None:
    """asyncpg is handed libpq's settings, or the string is refused: because libpq
    refuses it, or because it holds a setting asyncpg cannot honour."""
    libpq = _libpq(conninfo)
    ours = _handed_to_asyncpg(conninfo)
    if libpq is None or not libpq.keys() <= _NATIVE or _unlisted_host(libpq):
        assert ours is None
    else:
        # An empty value is libpq's "not given" (its default), as a missing one is.
        assert ours == {k: v for k, v in libpq.items() if v}


CASES = [
    "",
    "   ",
    "host=",
    "dbname=app",
    "dbname=app user=ada host=/tmp port=5432",
    "dbname='a b' host = x",
    "host\t=\t''",
    "host=''port=5",
    "host='a'x=1",
    "host='a'b",
    "host='a\\'b'",
    "host='a\\\\b'",
    "host=a\\ b\\\\c",
    "host=\\'x",
    "host=\\",
    "host=a\\",
    "host='a\\",
    "dbname='x",
    "dbname='",
    "host=a host=b",
    "dbname=x dbname=",
    "host=a=b",
    "host=a\tport=1\n",
    "host=a\x0bport=1\x0c",
    "host=a\rport=1",
    "host=a\xa0port=1",
    "application_name=\xe9t\xe9",
    "options='-c search_path=x\\,y'",
    "host",
    "host x",
    "host =",
    "=x",
    " = ",
    "foo=1",
    "Host=x",
    "requiressl=1",
    "requiressl=0",
    "requiressl=10",
    "requiressl=",
    "requiressl=1 sslmode=disable",
    "sslmode=disable requiressl=1",
    "password='it''s'",
    "postgresql://",
    "postgres://",
    "postgresql://h",
    "postgresql://u@h/d",
    "postgresql://u:p@h:5/d",
    "postgresql://u:@h",
    "postgresql://:p@h",
    "postgresql://@h",
    "postgresql://u:p%20q%40r@h1:5,h2/db?sslmode=require&application_name=a%20b",
    "postgresql://h1,h2",
    "postgresql://h1:1,h2:2,:3/d",
    "postgresql://,/d",
    "postgresql://[::1]:5432/d",
    "postgresql://[::1],[fe80::1%25eth0]/d",
    "postgresql://[::1",
    "postgresql://[]/d",
    "postgresql://[::1]x/d",
    "postgresql://?host=:]",
    "postgresql://?host=[a]",
    "postgresql:///d?host=/run/pg%20x&port=5433",
    "postgresql:///d?host=%2Frun",
    "postgresql:///d?",
    "postgresql:///d?&",
    "postgresql:///d?x",
    "postgresql:///d?host=a&",
    "postgresql:///d?host=a=b",
    "postgresql:///d?colour=blue",
    "postgresql:///d?ssl=true",
    "postgresql:///d?ssl=false",
    "postgresql:///d?requiressl=1",
    "postgresql:///d?host=%zz",
    "postgresql:///d?host=%2",
    "postgresql:///%00",
    "postgresql:///a/b?c=d",
    "postgresql://u@h/d@x",
    "postgresql://h/d?user=a&user=b",
    "postgresql://a:b:c@h",
    "postgresql:/d",
]


def _no_nul(text: str) -> bool:
    return "\0" not in text


@pytest.mark.parametrize("conninfo", CASES)
def test_chosen_strings_reach_asyncpg_as_libpq_reads_them(conninfo: str) -> None:
    _agrees_with_libpq(conninfo)


_KEYS = st.sampled_from(["host", "dbname", "user", "port", "options", "requiressl", "x"])
_TEXT = st.text(st.sampled_from(list("ab= '\\\t\n\xe9")), max_size=8)
_PIECES = st.one_of(
    st.tuples(_KEYS, st.sampled_from(["=", " = ", "\t=", "= "]), _TEXT).map("".join),
    st.tuples(_KEYS, st.just("='"), _TEXT, st.sampled_from(["'", ""])).map("".join),
    _TEXT,
)
_URI_TEXT = st.lists(
    st.sampled_from([*"ab1:@/?&=,[]%2F0", "%20", "host=", "ssl=true"]), max_size=12
).map("".join)


@settings(max_examples=2000, deadline=None)
@given(st.lists(_PIECES, max_size=5).map(" ".join))
def test_generated_strings_reach_asyncpg_as_libpq_reads_them(conninfo: str) -> None:
    _agrees_with_libpq(conninfo)


@settings(max_examples=2000, deadline=None)
@given(st.tuples(st.sampled_from(["postgresql://", "postgres://"]), _URI_TEXT).map("".join))
def test_generated_uris_reach_asyncpg_as_libpq_reads_them(uri: str) -> None:
    _agrees_with_libpq(uri)


REFUSED = [
    "hostaddr=127.0.0.2",
    "require_auth=scram-sha-256",
    "requirepeer=postgres",
    "channel_binding=require",
    "channel_binding=prefer",
    "gssencmode=require",
    "gssencmode=prefer",
    "gssdelegation=1",
    "sslcertmode=require",
    "sslcertmode=disable",
    "sslsni=0",
    "sslcrldir=/etc/crl",
    "sslkeylogfile=/tmp/keys",
    "keepalives=0",
    "keepalives_idle=5",
    "keepalives_interval=5",
    "keepalives_count=5",
    "tcp_user_timeout=1000",
    "replication=database",
    "load_balance_hosts=random",
    "min_protocol_version=3.2",
    "max_protocol_version=3.1",
    "client_encoding=LATIN1",
    "scram_client_key=a",
    "scram_server_key=a",
    "oauth_issuer=https://a",
    "oauth_client_id=a",
    "oauth_client_secret=a",
    "oauth_scope=a",
]
"""One setting each that asyncpg cannot honour as libpq does (every libpq keyword
asyncpg lacks, and each accepted keyword with a value asking for more)."""
REFUSED = [
    r
    for r in REFUSED
    if r.split("=")[0] in {o.keyword.decode() for o in pq.Conninfo.get_defaults()}
]


@pytest.mark.parametrize("setting", REFUSED)
def test_a_setting_asyncpg_cannot_honour_is_refused_and_named(setting: str) -> None:
    key, _, value = setting.partition("=")
    named = re.escape(f'{key}="{value}"')
    with pytest.raises(InputError, match=f"setting {named}"):
        asyncpg_target(f"dbname=d {setting}")
    with pytest.raises(InputError, match=f"setting {named}"):
        asyncpg_target(f"postgresql://h/d?{key}={value}")


@pytest.mark.parametrize("setting", REFUSED)
def test_an_environment_variable_asyncpg_cannot_honour_is_refused_and_named(
    setting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, _, value = setting.partition("=")
    env = {o.keyword.decode(): o.envvar for o in pq.Conninfo.get_defaults()}[key]
    if env is None:
        pytest.skip(f"libpq reads no environment variable for {key}")
    monkeypatch.setenv(env.decode(), value)
    with pytest.raises(InputError, match=re.escape(f'variable {env.decode()}="{value}"')):
        asyncpg_target("dbname=d")
    # The string's own setting comes first, as in libpq: empty, it is "not given".
    assert asyncpg_target(f"dbname=d {key}=").url == "postgresql:///d?"


def test_a_service_is_read_as_libpq_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = tmp_path / "pg_service.conf"
    services.write_text(
        "# comment\n[app]\nhost=/run/pg\ndbname=app\nport=6543\n"
        "[evil]\nhost=db.example\nhostaddr=10.0.0.9\n"
    )
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    assert asyncpg_target("service=app dbname=mine").url == (
        "postgresql:///mine?host=%2Frun%2Fpg&port=6543"
    )
    monkeypatch.setenv("PGSERVICE", "app")
    assert asyncpg_target("").url == "postgresql:///app?host=%2Frun%2Fpg&port=6543"
    with pytest.raises(InputError, match=re.escape('setting hostaddr="10.0.0.9"')):
        asyncpg_target("service=evil")
    with pytest.raises(InputError, match=re.escape('the service "none"')):
        asyncpg_target("service=none")


def test_the_settings_asyncpg_honours_reach_it() -> None:
    target = asyncpg_target(
        "dbname='my db' host=/run/pg,::1 port=5433,5434 options='-c a=b' sslmode=verify-full "
        "target_session_attrs=read-write fallback_application_name=fb connect_timeout=7 "
        "client_encoding=UTF8 channel_binding=disable gssencmode=disable sslcertmode=allow "
        "sslsni=1 load_balance_hosts=disable sslcompression=0"
    )
    assert target.url == (
        "postgresql:///my%20db?host=%2Frun%2Fpg%2C%5B%3A%3A1%5D&port=5433%2C5434"
        "&options=-c%20a%3Db&sslmode=verify-full&target_session_attrs=read-write"
        "&application_name=fb"
    )
    assert target.options == {"timeout": 7.0}
    named = asyncpg_target("application_name=a fallback_application_name=fb")
    assert named.url == "postgresql:///?application_name=a"


def test_settings_asyncpg_does_not_read_from_the_environment_are_honoured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGAPPNAME", "from-env")
    monkeypatch.setenv("PGOPTIONS", "-c x.y=1")
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "9")
    target = asyncpg_target("dbname=d")
    assert target.url == "postgresql:///d?options=-c%20x.y%3D1&application_name=from-env"
    assert target.options == {"timeout": 9.0}
    assert asyncpg_target("dbname=d application_name=mine").url == (
        "postgresql:///d?application_name=mine&options=-c%20x.y%3D1"
    )


@pytest.mark.parametrize(
    ("conninfo", "words"),
    [
        ("host", 'missing "=" after "host"'),
        ("dbname='x", "unterminated quoted string"),
        ("colour=blue", 'invalid connection option "colour"'),
        ("host=a\0b", "U+0000"),
        ("connect_timeout=soon", 'connect_timeout "soon"'),
    ],
)
def test_a_refusal_names_what_is_wrong(conninfo: str, words: str) -> None:
    with pytest.raises(InputError, match=re.escape(words)):
        asyncpg_target(conninfo)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://ada:s%40cret@db.example:5433/app?sslmode=require",
        "host=/run/pg dbname='my app' password='it\\'s' user=ada",
        "postgresql://ada@db/app",
        "not a dsn",
    ],
)
def test_the_demo_shows_a_dsn_without_its_password(dsn: str) -> None:
    try:
        libpq = conninfo_to_dict(dsn)
    except ProgrammingError:
        libpq = {}
    hidden = libpq.pop("password", None) is not None
    assert without_password(dsn) == ((make_conninfo("", **libpq) if hidden else dsn), hidden)


def test_parse_conninfo_is_libpqs() -> None:
    assert parse_conninfo("postgresql://u@h/d?ssl=true") == {
        "user": "u", "dbname": "d", "host": "h", "sslmode": "require"
    }  # fmt: skip
