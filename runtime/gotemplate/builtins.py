"""Go's predefined template functions (`text/template/funcs.go`): and or not len index slice
eq ne lt le gt ge print printf println html js urlquery call.

Comparison follows Go's basic kinds: bool, int, float, string. Values of different kinds are
"incompatible types for comparison" (1 and 1.0 included: an untyped 1 is an int in a
template), ordering bools is "invalid type for comparison", and `eq` accepts several right-hand
operands ("is arg1 equal to any of these").
"""

from __future__ import annotations

import html as _html
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

from yurt.runtime.gotemplate.exec import ArgTypeError, FuncError, is_true
from yurt.runtime.gotemplate.gofmt import NO_VALUE, go_type, sprint, sprintf, sprintln
from yurt.runtime.gotemplate.limits import MAX_OUTPUT

_BAD_COMPARISON: Final = "incompatible types for comparison"
_BAD_TYPE: Final = "invalid type for comparison"
_NO_COMPARISON: Final = "missing argument for comparison"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if value is None or value is NO_VALUE:
        return "invalid"
    return "other"


def eq(arg1: Any, *arg2: Any) -> bool:
    if not arg2:
        raise FuncError(_NO_COMPARISON)
    k1 = _kind(arg1)
    for arg in arg2:
        k2 = _kind(arg)
        if k1 != k2:
            if k1 != "invalid" and k2 != "invalid":
                raise FuncError(_BAD_COMPARISON)
            continue
        if k1 == "other" and (isinstance(arg1, (list, dict)) or isinstance(arg, (list, dict))):
            raise FuncError(f"non-comparable type {sprint(arg1)}: {go_type(arg1)}")
        if k1 == "invalid" or arg1 == arg:
            return True
    return False


def ne(arg1: Any, arg2: Any) -> bool:
    return not eq(arg1, arg2)


def lt(arg1: Any, arg2: Any) -> bool:
    k1, k2 = _kind(arg1), _kind(arg2)
    if k1 not in ("int", "float", "string", "bool") or k2 not in ("int", "float", "string", "bool"):
        raise FuncError(_BAD_TYPE)
    if k1 != k2:
        raise FuncError(_BAD_COMPARISON)
    if k1 == "bool":
        raise FuncError(_BAD_TYPE)
    return bool(arg1 < arg2)


def le(arg1: Any, arg2: Any) -> bool:
    return lt(arg1, arg2) or eq(arg1, arg2)


def gt(arg1: Any, arg2: Any) -> bool:
    return not le(arg1, arg2)


def ge(arg1: Any, arg2: Any) -> bool:
    return not lt(arg1, arg2)


def not_(arg: Any) -> bool:
    return not is_true(arg)


def and_(arg0: Any, *args: Any) -> Any:  # the evaluator short-circuits; kept for `call`
    for value in (arg0, *args):
        if not is_true(value):
            return value
    return value


def or_(arg0: Any, *args: Any) -> Any:
    for value in (arg0, *args):
        if is_true(value):
            return value
    return value


def length(item: Any) -> int:
    if isinstance(item, (str, list, tuple, dict, bytes)):
        return len(item)
    if item is None or item is NO_VALUE:
        raise FuncError("len of nil pointer")
    raise FuncError(f"len of type {go_type(item)}")


def _index_of(value: Any, size: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if value is None or value is NO_VALUE:
            raise FuncError("cannot index slice/array with nil")
        raise FuncError(f"cannot index slice/array with type {go_type(value)}")
    if value < 0 or value >= size:
        raise FuncError(f"index out of range: {value}")
    return value


def index(item: Any, *indexes: Any) -> Any:
    if item is None or item is NO_VALUE:
        raise FuncError("index of untyped nil")
    for key in indexes:
        if isinstance(item, (list, tuple, str, bytes)):
            got: Any = item[_index_of(key, len(item))]
            item = got.encode()[0] if isinstance(item, str) else got  # a string gives a byte
        elif isinstance(item, dict):
            if not isinstance(key, str) and any(isinstance(k, str) for k in item):
                raise FuncError(f"value has type {go_type(key)}; should be string")
            item = item.get(key)
        elif item is None:
            raise FuncError("index of nil pointer")
        else:
            raise FuncError(f"can't index item of type {go_type(item)}")
    return item


def slice_(item: Any, *indexes: Any) -> Any:
    if item is None or item is NO_VALUE:
        raise FuncError("slice of untyped nil")
    if len(indexes) > 3:
        raise FuncError(f"too many slice indexes: {len(indexes)}")
    if not isinstance(item, (str, list, tuple)):
        raise FuncError(f"can't slice item of type {go_type(item)}")
    if isinstance(item, str) and len(indexes) == 3:
        raise FuncError("cannot 3-index slice a string")
    bounds = [0, len(item)]
    for i, value in enumerate(indexes[:2]):
        bounds[i] = _index_of(value, len(item) + 1)
    if bounds[0] > bounds[1]:
        raise FuncError(f"invalid slice index: {bounds[0]} > {bounds[1]}")
    return item[bounds[0] : bounds[1]]


def _text_of(args: tuple[Any, ...]) -> str:
    """The operands as one text (fmt.Sprint), within `MAX_OUTPUT`."""
    return args[0] if len(args) == 1 and isinstance(args[0], str) else sprint(*args)


def check_size(size: int) -> None:
    """Refuse a result beyond `MAX_OUTPUT` before building it: a function whose result can
    be a product of its inputs' sizes would otherwise allocate it before the evaluator's
    check after the call could stop it."""
    if size > MAX_OUTPUT:
        raise FuncError(f"result exceeds {MAX_OUTPUT} characters")


def _check_escaped(text: str, growth: dict[str, int]) -> None:
    """Refuse an escape whose result would exceed `MAX_OUTPUT` characters, before it is
    built: each character in `growth` becomes that many characters more (a C-speed count
    per character, where escaping the text itself would build the result first)."""
    check_size(len(text))
    check_size(len(text) + sum(text.count(ch) * more for ch, more in growth.items()))


#: html.escape's growth per character (with `'` as Go's `&#39;`).
_HTML_GROWTH: Final = {"&": 4, "<": 3, ">": 3, '"': 5, "'": 4}
#: Go's JSEscape: `\\`, `\'`, `\"` for three characters, `\uXXXX` for `<>&=` and controls.
_JS_ESCAPES: Final = {
    **{ord(ch): f"\\u{ord(ch):04X}" for ch in "<>&="},
    **{code: f"\\u{code:04X}" for code in range(0x20)},
    ord("\\"): "\\\\",
    ord("'"): "\\'",
    ord('"'): '\\"',
}
_JS_GROWTH: Final = {chr(code): len(esc) - 1 for code, esc in _JS_ESCAPES.items()}
#: The bytes url.QueryEscape (and quote_plus) keep as one character (a space becomes `+`);
#: any other byte of the UTF-8 text becomes `%XX`.
_QUERY_ONE_CHAR: Final = (
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~ "
)


def html_escape(*args: Any) -> str:
    text = _text_of(args)
    _check_escaped(text, _HTML_GROWTH)
    return _html.escape(text).replace("&#x27;", "&#39;")


def js_escape(*args: Any) -> str:
    text = _text_of(args)
    _check_escaped(text, _JS_GROWTH)
    return text.translate(_JS_ESCAPES)  # one C pass: no object per character


def urlquery(*args: Any) -> str:
    data = _text_of(args).encode()
    # quote_plus builds a list with an item per byte: count the result before that.
    escaped = len(data.translate(None, _QUERY_ONE_CHAR))  # the bytes that become `%XX`
    check_size(len(data) + 2 * escaped)
    return urllib.parse.quote_plus(data)


def printf(fmt: Any, *args: Any) -> str:
    if not isinstance(fmt, str):
        raise ArgTypeError(f"wrong type for value; expected string; got {go_type(fmt)}")
    return sprintf(fmt, *args)


def call(fn: Any, *args: Any) -> Any:
    if fn is None or fn is NO_VALUE:
        raise FuncError("call of nil")
    if not callable(fn):
        raise FuncError(f"non-function of type {go_type(fn)}")
    return fn(*args)


BUILTINS: Final[dict[str, Callable[..., Any]]] = {
    "and": and_,
    "or": or_,
    "not": not_,
    "len": length,
    "index": index,
    "slice": slice_,
    "eq": eq,
    "ne": ne,
    "lt": lt,
    "le": le,
    "gt": gt,
    "ge": ge,
    "print": sprint,
    "printf": printf,
    "println": sprintln,
    "html": html_escape,
    "js": js_escape,
    "urlquery": urlquery,
    "call": call,
}
