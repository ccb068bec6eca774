"""cwstore.conninfo reads a connection string (``key=value`` or URI) as libpq does, and
writes one as psycopg does: psycopg's ``conninfo_to_dict`` (libpq's own parser) and
``make_conninfo`` are the oracles, over chosen and generated strings, refusals
included."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import ProgrammingError, pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from cwstore import InputError
from cwstore.conninfo import KEYWORDS, format_conninfo, parse_conninfo
from cwstore.demo import _display_dsn
from cwstore.drivers.asyncpg import url_dsn


def _libpq(conninfo: str) -> list[tuple[str, str]] | str:
    """libpq's settings for ``conninfo`` in its order, or the kind of its refusal."""
    try:
        return [(k, str(v)) for k, v in conninfo_to_dict(conninfo).items()]
    except ProgrammingError as exc:
        return _refusal(str(exc))
    except UnicodeDecodeError:  # psycopg's, reading what libpq decoded
        return "utf-8"


def _ours(conninfo: str) -> list[tuple[str, str]] | str:
    try:
        return list(parse_conninfo(conninfo).items())
    except InputError as exc:
        return _refusal(str(exc))


_KINDS = [  # words of libpq's refusal or ours (the first found), and what it is about
    ("IPv6", "ipv6"),
    ("unexpected character", "ipv6"),
    ("percent", "percent"),
    ("%00", "percent"),
    ("extra key/value", "two ="),
    ('second "="', "two ="),
    ('missing "="', "no ="),
    ("missing key/value", "no ="),
    ('has no "="', "no ="),
    ("quote", "quote"),
    ("invalid connection option", "key"),
    ("invalid URI query parameter", "key"),
    ("unknown connection setting", "key"),
    ("UTF-8", "utf-8"),
]


def _refusal(message: str) -> str:
    for words, kind in _KINDS:
        if words in message:
            return kind
    raise AssertionError(f"a refusal of no known kind: {message}")


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
def test_chosen_strings_read_as_libpq_reads_them(conninfo: str) -> None:
    assert _ours(conninfo) == _libpq(conninfo)


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
def test_generated_strings_read_as_libpq_reads_them(conninfo: str) -> None:
    assert _ours(conninfo) == _libpq(conninfo)


@settings(max_examples=2000, deadline=None)
@given(st.tuples(st.sampled_from(["postgresql://", "postgres://"]), _URI_TEXT).map("".join))
def test_generated_uris_read_as_libpq_reads_them(uri: str) -> None:
    assert _ours(uri) == _libpq(uri)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYWORDS), st.text(max_size=6).filter(_no_nul)))
def test_settings_are_written_as_psycopg_writes_them(settings: dict[str, str]) -> None:
    ordered = parse_conninfo(format_conninfo(settings))
    assert ordered == settings
    assert format_conninfo(ordered) == make_conninfo("", **ordered)


def test_the_keys_known_are_every_key_this_libpq_knows() -> None:
    here = {o.keyword.decode() for o in pq.Conninfo.get_defaults()}
    assert here <= set(KEYWORDS)
    if pq.version() // 10000 == 18:
        assert list(KEYWORDS) == [o.keyword.decode() for o in pq.Conninfo.get_defaults()]


@pytest.mark.parametrize(
    ("conninfo", "words"),
    [
        ("host", 'missing "=" after "host"'),
        ("dbname='x", "quoted value is not closed"),
        ("colour=blue", 'unknown connection setting "colour"'),
        ("host=a\0b", "U+0000"),
    ],
)
def test_a_refusal_names_what_is_wrong(conninfo: str, words: str) -> None:
    with pytest.raises(InputError, match=re.escape(words)):
        parse_conninfo(conninfo)
    with pytest.raises(InputError, match=re.escape(words)):
        url_dsn(conninfo)


def test_the_asyncpg_url_carries_every_setting() -> None:
    assert url_dsn("postgresql://u@h/d") == "postgresql://u@h/d"
    assert url_dsn("dbname='my db' host=/run/pg port=5433 options='-c a=b'") == (
        "postgresql:///my%20db?host=%2Frun%2Fpg&port=5433&options=-c%20a%3Db"
    )


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
    assert _display_dsn(dsn) == ((make_conninfo("", **libpq) if hidden else dsn), hidden)
