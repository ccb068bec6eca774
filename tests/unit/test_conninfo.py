"""cwstore.conninfo reads a ``key=value`` connection string as libpq does: psycopg's
``conninfo_to_dict`` (libpq's own parser) is the oracle, over chosen and generated
strings, refusals included."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import ProgrammingError, pq
from psycopg.conninfo import conninfo_to_dict

from cwstore import InputError
from cwstore.conninfo import KEYWORDS, parse_conninfo
from cwstore.drivers.asyncpg import url_dsn


def _libpq(conninfo: str) -> dict[str, str] | str:
    """libpq's settings for ``conninfo``, or the first word of its refusal."""
    try:
        return {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
    except ProgrammingError as exc:
        return _refusal(str(exc))


def _ours(conninfo: str) -> dict[str, str] | str:
    try:
        return parse_conninfo(conninfo)
    except InputError as exc:
        return _refusal(str(exc))


def _refusal(message: str) -> str:
    kinds = {'missing "="': "equals", "quote": "quote", "option": "key", "setting": "key"}
    for word, kind in kinds.items():
        if word in message:
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
]


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


@settings(max_examples=2000, deadline=None)
@given(st.lists(_PIECES, max_size=5).map(" ".join))
def test_generated_strings_read_as_libpq_reads_them(conninfo: str) -> None:
    assert _ours(conninfo) == _libpq(conninfo)


def test_the_keys_known_are_every_key_this_libpq_knows() -> None:
    here = {o.keyword.decode() for o in pq.Conninfo.get_defaults()}
    assert here <= KEYWORDS
    if pq.version() // 10000 == 18:
        assert here == KEYWORDS


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
