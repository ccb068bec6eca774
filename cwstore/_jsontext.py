"""JSON exactly as the StateWeave runtime reads and writes it (pure, no I/O).

The runtime is JavaScript: it parses with ``JSON.parse`` (every number a double) and
writes with ``JSON.stringify``. This module gives Python the same behaviour:

* :func:`loads` parses a document keeping object member order, marks what JavaScript
  would mangle (``NaN``/``Infinity`` tokens, duplicate keys) instead of failing, and
  never hits a recursion limit: deeply nested input (100,000 brackets) falls back to an
  iterative parser.
* :func:`dumps` writes compact JSON the way ``JSON.stringify`` does: member order as
  given, strings escaped as JavaScript escapes them, numbers in JavaScript's
  ``Number.prototype.toString`` form (``1e+21``, ``1e-7``, ``100``). A document the
  runtime wrote therefore comes back byte for byte; a number another writer spelled
  differently (``1.0``, ``1E5``) comes back in the runtime's spelling, with the same value.
* :func:`problems` walks a value and reports what cannot be stored or hashed
  faithfully, with a JSON path for each, so callers can refuse with a clear error.

Both walkers are iterative or guarded, so nesting depth is limited only by
:data:`MAX_DEPTH`, never by Python's recursion limit.
"""

from __future__ import annotations

import contextlib
import json
import json.decoder
import math
import re
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "BadNumber",
    "DuplicateKeysDict",
    "HugeInteger",
    "JSONTextError",
    "dumps",
    "js_number",
    "loads",
    "path_key",
    "pretty",
    "problems",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer a JavaScript number holds exactly; larger ones are refused."""

MAX_DEPTH = 10_000
"""Deepest nesting of arrays and objects accepted in a payload."""


class JSONTextError(ValueError):
    """The text is not JSON. ``line``/``column`` are 1-based, ``pos`` 0-based."""

    def __init__(self, message: str, pos: int, line: int, column: int) -> None:
        self.msg = message
        self.pos = pos
        self.line = line
        self.column = column
        super().__init__(f"{message} at line {line} column {column}")


class BadNumber(str):
    """A ``NaN``, ``Infinity`` or ``-Infinity`` token: JSON.parse refuses these."""

    __slots__ = ()


class HugeInteger(str):
    """An integer literal too long for Python to convert (over 4,300 digits): far
    beyond what JavaScript holds, kept as its text so :func:`problems` can name it."""

    __slots__ = ()


def _parse_int(text: str) -> int | HugeInteger:
    try:
        return int(text)
    except ValueError:
        return HugeInteger(text)


class DuplicateKeysDict(dict[str, Any]):
    """An object that named some key twice; ``duplicates`` lists those keys."""

    duplicates: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        dd = DuplicateKeysDict(d)
        seen: set[str] = set()
        dd.duplicates = sorted({k for k, _ in pairs if k in seen or seen.add(k)})  # type: ignore[func-returns-value]
        return dd
    return d


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def loads(text: str) -> Any:
    """Parse JSON text; objects keep member order.

    Raises :class:`JSONTextError` for text that is not JSON (with line and column).
    ``NaN``/``Infinity`` come back as :class:`BadNumber`, objects with repeated keys as
    :class:`DuplicateKeysDict`, so :func:`problems` can name them with a path.
    """
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=BadNumber)
    except json.JSONDecodeError as exc:
        raise JSONTextError(exc.msg, exc.pos, exc.lineno, exc.colno) from None
    except (RecursionError, ValueError):
        # Nesting past the recursion limit, or an integer of more than 4,300 digits
        # (Python refuses to convert it): the iterative parser handles both.
        try:
            return _loads_iterative(text)
        except json.JSONDecodeError as exc:
            raise JSONTextError(exc.msg, exc.pos, exc.lineno, exc.colno) from None


def loads_stored(text: str) -> Any:
    """Parse JSON text that cwstore wrote after validating it: the C parser alone.

    What was stored has no repeated keys and no ``NaN``/``Infinity`` (import and append
    refuse them), so the checks :func:`loads` makes for :func:`problems` have nothing to
    find; skipping its per-object hook makes reading state several times faster. Deep
    nesting still falls back to the iterative parser.
    """
    try:
        return json.loads(text)
    except RecursionError:
        try:
            return _loads_iterative(text)
        except json.JSONDecodeError as exc:
            raise JSONTextError(exc.msg, exc.pos, exc.lineno, exc.colno) from None


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = json.scanner.NUMBER_RE  # type: ignore[attr-defined]
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_LITERALS: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "NaN": BadNumber("NaN"),
    "Infinity": BadNumber("Infinity"),
    "-Infinity": BadNumber("-Infinity"),
}


def _loads_iterative(text: str) -> Any:
    """The same grammar as :func:`loads`, with an explicit stack instead of recursion."""
    n = len(text)
    # Each frame: [container, pending_key_or_None, pairs_list_for_objects]
    stack: list[list[Any]] = []
    pos = _skip_ws(text, 0)
    while True:
        value, pos = _scan_value(text, pos, stack)
        if value is _OPENED:
            continue
        # Attach the value to its container, closing containers as they end.
        while stack:
            frame = stack[-1]
            pos = _skip_ws(text, pos)
            if frame[0] == "{":
                more, pos = _after_member(text, pos, frame, value)
            else:
                more, pos = _after_element(text, pos, frame, value)
            if more:
                break
            stack.pop()
            value = _pairs(frame[2]) if frame[0] == "{" else frame[2]
        else:
            end = _skip_ws(text, pos)
            if end != n:
                raise _fail(text, "Extra data", end)
            return value


_OPENED: Any = object()
"""What :func:`_scan_value` gives for a container it opened: its members come next."""


def _fail(text: str, msg: str, pos: int) -> JSONTextError:
    line, col = _line_col(text, pos)
    return JSONTextError(msg, pos, line, col)


def _skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]


def _scan_value(text: str, pos: int, stack: list[list[Any]]) -> tuple[Any, int]:
    """The value at ``pos`` and the position after it; for a container that is not
    empty, :data:`_OPENED` (its frame pushed on ``stack``) and the position of its first
    member's value."""
    if pos >= len(text):
        raise _fail(text, "Expecting value", pos)
    ch = text[pos]
    if ch == "{":
        return _open_object(text, pos, stack)
    if ch == "[":
        return _open_array(text, pos, stack)
    if ch == '"':
        return _scanstring(text, pos + 1, True)
    return _scan_scalar(text, pos)


def _open_object(text: str, pos: int, stack: list[list[Any]]) -> tuple[Any, int]:
    pos = _skip_ws(text, pos + 1)
    if pos < len(text) and text[pos] == "}":
        return {}, pos + 1
    key, pos = _scan_key(text, pos)
    stack.append(["{", key, []])
    return _OPENED, pos


def _open_array(text: str, pos: int, stack: list[list[Any]]) -> tuple[Any, int]:
    pos = _skip_ws(text, pos + 1)
    if pos < len(text) and text[pos] == "]":
        return [], pos + 1
    stack.append(["[", None, []])
    return _OPENED, pos


def _scan_key(text: str, pos: int) -> tuple[str, int]:
    """A member's key at ``pos`` and the position of its value (past the colon)."""
    n = len(text)
    if pos >= n or text[pos] != '"':
        raise _fail(text, "Expecting property name enclosed in double quotes", pos)
    key, pos = _scanstring(text, pos + 1, True)
    pos = _skip_ws(text, pos)
    if pos >= n or text[pos] != ":":
        raise _fail(text, "Expecting ':' delimiter", pos)
    return key, _skip_ws(text, pos + 1)


def _scan_scalar(text: str, pos: int) -> tuple[Any, int]:
    """A number or a literal (``null``, ``true``, ``NaN``, …) at ``pos``."""
    m = _NUMBER.match(text, pos)
    if m is not None and m.end() > pos:
        integer, frac, exp = m.groups()
        if frac or exp:
            return float(integer + (frac or "") + (exp or "")), m.end()
        return _parse_int(integer), m.end()
    for word, lit in _LITERALS.items():
        if text.startswith(word, pos):
            return lit, pos + len(word)
    raise _fail(text, "Expecting value", pos)


def _after_member(text: str, pos: int, frame: list[Any], value: Any) -> tuple[bool, int]:
    """Store ``value`` under the object's pending key; then either read the next key
    (``True``, the position of its value) or close the object (``False``, past it)."""
    frame[2].append((frame[1], value))
    n = len(text)
    if pos < n and text[pos] == ",":
        frame[1], pos = _scan_key(text, _skip_ws(text, pos + 1))
        return True, pos
    if pos < n and text[pos] == "}":
        return False, pos + 1
    raise _fail(text, "Expecting ',' delimiter", pos)


def _after_element(text: str, pos: int, frame: list[Any], value: Any) -> tuple[bool, int]:
    """Append ``value`` to the array; then either a next element follows (``True``, its
    position) or the array closes (``False``, past it)."""
    frame[2].append(value)
    n = len(text)
    if pos < n and text[pos] == ",":
        return True, _skip_ws(text, pos + 1)
    if pos < n and text[pos] == "]":
        return False, pos + 1
    raise _fail(text, "Expecting ',' delimiter", pos)


# --- numbers -----------------------------------------------------------------------


def js_number(x: int | float) -> str:
    """``String(x)`` in JavaScript, for a finite number (ints within 2**53 included).

    Python's ``repr`` and JavaScript both print the shortest digits that round-trip;
    only the layout differs (ECMAScript ``Number::toString``: plain notation for
    exponents -7 < e < 21, else ``d.ddde+N``).
    """
    if isinstance(x, int):
        return str(int(x))
    if x == 0.0:
        return "0"
    sign, digit_tuple, exp = Decimal(repr(float(x))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    assert isinstance(exp, int)
    n = len(digit_tuple) + exp  # the decimal point sits after n digits
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mant = digits[0] + ("." + digits[1:] if k > 1 else "")
        out = f"{mant}e{'+' if e >= 0 else '-'}{abs(e)}"
    return ("-" if sign else "") + out


# --- writing -------------------------------------------------------------------------

_dumps_fast = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
).encode
_dump_str: Callable[[str], str] = json.encoder.py_encode_basestring
with contextlib.suppress(ImportError):  # the C escaper, identical output
    from _json import encode_basestring as _dump_str


class _Slow(Exception):
    """The fast path cannot write this value exactly."""


KeyOrder = Callable[[dict[str, Any]], list[str]]


def _fast_copy(value: Any, order: KeyOrder | None, depth: int = 0) -> Any:
    """A copy json's C encoder writes exactly as JavaScript would, or raise _Slow."""
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is int:
        return value
    if t is float:
        if value.is_integer():
            if abs(value) <= MAX_SAFE_INTEGER:
                return int(value)
            raise _Slow  # repr() would add ".0" or an exponent; String() does not
        if 1e-4 <= abs(value) < 1e16:
            return value  # repr() and String() agree for non-integers in this range
        raise _Slow
    if depth > 400:
        raise _Slow
    if t is dict or isinstance(value, dict):
        keys = order(value) if order is not None else value
        return {k: _fast_copy(value[k], order, depth + 1) for k in keys}
    if t is list:
        return [_fast_copy(v, order, depth + 1) for v in value]
    raise _Slow


def _write_slow(value: Any, order: KeyOrder | None, indent: int = 0) -> str:
    """Iterative writer: any depth, any finite number; ``indent`` as JSON.stringify's."""
    out: list[str] = []
    colon = ": " if indent else ":"

    def newline(depth: int) -> str:
        return "\n" + " " * (indent * depth) if indent else ""

    # Work items: ("v", value, depth) to write a value, ("s", text, depth) to emit text.
    work: list[tuple[str, Any, int]] = [("v", value, 0)]
    while work:
        tag, item, depth = work.pop()
        if tag == "s":
            out.append(item)
            continue
        v = item
        if v is None:
            out.append("null")
        elif v is True:
            out.append("true")
        elif v is False:
            out.append("false")
        elif isinstance(v, str):
            out.append(_dump_str(v))
        elif isinstance(v, int | float):
            out.append(js_number(v))
        elif isinstance(v, dict):
            keys = order(v) if order is not None else list(v)
            if not keys:
                out.append("{}")
                continue
            out.append("{")
            work.append(("s", newline(depth) + "}", depth))
            for i in range(len(keys) - 1, -1, -1):
                k = keys[i]
                work.append(("v", v[k], depth + 1))
                work.append(
                    ("s", ("," if i else "") + newline(depth + 1) + _dump_str(k) + colon, 0)
                )
        elif isinstance(v, list | tuple):
            if not v:
                out.append("[]")
                continue
            out.append("[")
            work.append(("s", newline(depth) + "]", depth))
            for i in range(len(v) - 1, -1, -1):
                work.append(("v", v[i], depth + 1))
                work.append(("s", ("," if i else "") + newline(depth + 1), 0))
        else:
            raise TypeError(f"not a JSON value: {type(v).__name__}")
    return "".join(out)


def write(value: Any, order: KeyOrder | None = None) -> str:
    """Compact JSON as ``JSON.stringify`` writes it, object keys ordered by ``order``.

    ``order`` maps an object to its keys in the order to write them (default: as
    given). The value must be free of :func:`problems`.
    """
    try:
        if order is None and _plain(value) is _NO_FLOATS:
            return _dumps_fast(value)
        return _dumps_fast(_fast_copy(value, order))
    except (_Slow, RecursionError):
        return _write_slow(value, order)


def dumps(value: Any) -> str:
    """Compact JSON as ``JSON.stringify`` writes it, member order as given."""
    return write(value, None)


def pretty(value: Any, indent: int) -> str:
    """``JSON.stringify(value, null, indent)``: numbers and strings as :func:`dumps`
    writes them, each member and element on its own line; any depth."""
    return _write_slow(value, None, max(0, min(indent, 10)))


# --- checking ------------------------------------------------------------------------

_IDENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def path_key(path: str, key: str) -> str:
    """Extend a JSON path with an object member."""
    if _IDENT.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def _bad_string(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _exact_double(v: int) -> bool:
    """True when JavaScript reads ``v`` and writes back the very same digits.

    ``JSON.stringify(1e20)`` is ``100000000000000000000``: the runtime itself writes
    such literals, so they must import; ``9007199254740993`` would come back as
    ``…992`` and is refused.
    """
    try:
        return js_number(float(v)) == str(v)
    except OverflowError:
        return False


_NO_FLOATS = "no floats"
_FLOATS = "floats"


def _plain(value: Any) -> str | None:
    """Whether ``value`` is plainly free of :func:`problems`, found without the paths
    that :func:`problems` builds for every member: only ``dict``, ``list``, ``str``,
    ``int`` within ±(2**53-1), finite ``float``, ``bool`` and ``None`` (no subclass),
    string keys, no lone surrogate, nesting within :data:`MAX_DEPTH`. Returns
    ``_NO_FLOATS`` or ``_FLOATS`` (json's C encoder writes a value without floats as
    ``JSON.stringify`` does), or None: then :func:`problems` decides."""
    # Level by level: only containers are kept for later, each scalar is checked where
    # its container is read.
    floats = False
    level = [value]
    depth = 0
    while level:
        below: list[Any] = []
        for container in level:
            members = _plain_members(container, depth)
            if members is None:
                return None
            found = _plain_scalars(members, below)
            if found is None:
                return None
            floats = floats or found
        level = below
        depth += 1
    return _FLOATS if floats else _NO_FLOATS


def _plain_members(container: Any, depth: int) -> Iterable[Any] | None:
    """The values of a container at ``depth`` (a scalar: itself), or None when it cannot
    be plain (too deep, or a key that is not a plain string)."""
    t = type(container)
    if t is dict:
        if depth >= MAX_DEPTH:
            return None
        for k in container:
            if type(k) is not str or (not k.isascii() and _bad_string(k)):
                return None
        return container.values()  # type: ignore[no-any-return]
    if t is list:
        return None if depth >= MAX_DEPTH else container
    return (container,)


def _plain_scalars(members: Iterable[Any], below: list[Any]) -> bool | None:
    """Check each scalar of ``members`` and put each container in ``below``: whether a
    float was met, or None when one cannot be plain."""
    floats = False
    for v in members:
        t = type(v)
        if t is str:
            if not v.isascii() and _bad_string(v):
                return None
        elif t is dict or t is list:
            below.append(v)
        elif t is int:
            if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                return None
        elif t is float:
            if not math.isfinite(v):
                return None
            floats = True
        elif not (v is None or t is bool):
            return None
    return floats


def problems(value: Any, path: str = "$") -> Iterator[tuple[str, str, str]]:
    """Yield ``(code, path, message)`` for everything that cannot be kept exactly.

    Codes: ``unrepresentable`` (NaN/Infinity, integers beyond ±(2**53-1), lone
    surrogates, nesting deeper than :data:`MAX_DEPTH`) and ``shape`` (a key given
    twice, a Python value that is not JSON). Iterative: any depth is safe.
    """
    if _plain(value) is None:
        yield from _problems_walk(value, path)


def _problems_walk(value: Any, path: str) -> Iterator[tuple[str, str, str]]:
    """:func:`problems` by a walk of every value, each with its path."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        v, p, depth = stack.pop()
        t = type(v)
        if t is str:
            if _bad_string(v):
                yield ("unrepresentable", p, "string holds a lone surrogate (not valid Unicode)")
        elif t is bool or v is None:
            continue
        elif t is int:
            if not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER and not _exact_double(v):
                yield _unsafe_integer(v, p)
        elif isinstance(v, dict):
            yield from _object_problems(v, p, depth, stack)
        elif t is list or t is tuple:
            if depth >= MAX_DEPTH:
                yield _too_deep(p)
                continue
            for i in range(len(v) - 1, -1, -1):
                stack.append((v[i], f"{p}[{i}]", depth + 1))
        else:
            found = _scalar_problem(v, p)
            if found is not None:
                yield found


def _unsafe_integer(v: int, p: str) -> tuple[str, str, str]:
    return (
        "unrepresentable",
        p,
        f"integer {v} is beyond ±(2^53-1): JavaScript cannot hold it exactly",
    )


def _too_deep(p: str) -> tuple[str, str, str]:
    return ("unrepresentable", p, f"nesting deeper than {MAX_DEPTH} levels")


def _object_problems(
    v: dict[Any, Any], p: str, depth: int, stack: list[tuple[Any, str, int]]
) -> list[tuple[str, str, str]]:
    """What is wrong with the object ``v`` itself (its depth, repeated keys, keys that
    are not strings or hold a lone surrogate); its members are pushed on ``stack``
    (first member on top) for :func:`problems` to check."""
    if depth >= MAX_DEPTH:
        return [_too_deep(p)]
    found: list[tuple[str, str, str]] = []
    dups = getattr(v, "duplicates", None)
    if dups:
        found.append(("shape", p, f"object repeats key(s) {', '.join(map(repr, dups))}"))
    items = list(v.items())
    for k, item in reversed(items):
        if not isinstance(k, str):
            found.append(("shape", p, f"object key {k!r} is not a string"))
            continue
        kp = path_key(p, k)
        if _bad_string(k):
            found.append(("unrepresentable", kp, "key holds a lone surrogate"))
        stack.append((item, kp, depth + 1))
    return found


def _scalar_problem(v: Any, p: str) -> tuple[str, str, str] | None:
    """What is wrong with a value that is neither a string, a boolean, null, an int, an
    object nor an array (a float, a number JSON cannot hold, a value that is not JSON)."""
    t = type(v)
    if t is float:
        if not math.isfinite(v):
            return ("unrepresentable", p, f"{v} is not a finite number")
        return None
    if t is BadNumber:
        return ("unrepresentable", p, f"{v} is not a JSON number")
    if t is HugeInteger:
        return (
            "unrepresentable",
            p,
            f"an integer of {len(v.lstrip('-'))} digits is beyond ±(2^53-1): "
            "JavaScript cannot hold it exactly",
        )
    if isinstance(v, int | float | str):  # subclasses (e.g. IntEnum) are not JSON
        return ("shape", p, f"{type(v).__name__} is not a plain JSON value")
    return ("shape", p, f"{type(v).__name__} is not a JSON value")
