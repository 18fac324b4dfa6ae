"""Go's value printing (`fmt.Sprint`, `%v`, `Sprintf` with its verbs) over the Python values a
template sees: str, int, float, bool, None (Go's nil), list/tuple (slices), dict (maps, printed
in key order as Go does), and objects (structs; printed `{field ...}`, or through their Go
`String()` method when they have one).

`NO_VALUE` stands for Go's invalid `reflect.Value` (a missing map key): it prints as
"<no value>", which is what a template prints for `{{.missing}}`.

Verb errors are Go's in-band texts: `%!d(string=hi)`, `%!d(MISSING)`, `%!(EXTRA int=1)`.
Widths and precisions follow fmt's `tooLarge` rule (beyond 10^6: `%!(BADWIDTH)`/`%!(BADPREC)`
from `*`, the format's end from a literal); `sprintf` also stops (ValueError) once its verbs
have produced `limits.MAX_OUTPUT` characters, since a short format can repeat a wide verb, and
so do `sprint`/`sprintln` once their operands have, since a short call can repeat a long one.
"""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal
from typing import Any, Final

from yurt.runtime.gotemplate.limits import FMT_MAX_NUMBER, MAX_OUTPUT
from yurt.runtime.gotemplate.tokens import go_quote


class _NoValue:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Final = _NoValue()


def go_type(value: Any) -> str:
    """The Go type name a value stands for, as Go's error texts spell it."""
    if value is None or value is NO_VALUE:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, str) for v in value):
            return "[]string"
        return "[]interface {}"
    if isinstance(value, dict) and type(value) is dict:
        return "map[string]interface {}"
    return getattr(type(value), "GO_TYPE", type(value).__name__)


def struct_fields(value: Any) -> list[tuple[str, Any]]:
    """A struct's exported fields in declaration order."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    return [(k, v) for k, v in vars(value).items() if k[:1].isupper()]


def format_float(value: float, verb: str = "g", prec: int = -1) -> str:
    """strconv.FormatFloat for the verbs 'e', 'f', 'g' (prec -1 = shortest)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if verb == "f":
        if prec < 0:
            digits, dp = _shortest(value)
            prec = max(len(digits) - dp, 0)
        return f"{value:.{prec}f}"
    if verb == "e":
        if prec < 0:
            digits, _ = _shortest(value)
            prec = max(len(digits) - 1, 0)
        return _go_exponent(f"{value:.{prec}e}")
    # 'g': shortest digits use %e when the exponent is < -4 or >= 6 (Go prints 1e+06)
    if prec < 0:
        digits, dp = _shortest(value)
        exp = dp - 1
        if exp < -4 or exp >= 6:
            return _go_exponent(f"{value:.{max(len(digits) - 1, 0)}e}")
        return f"{value:.{max(len(digits) - dp, 0)}f}"
    text = f"{value:.{prec or 1}g}"
    return _go_exponent(text) if "e" in text else text


def _shortest(value: float) -> tuple[str, int]:
    """The shortest decimal digits that read back as `value`, and the decimal point position."""
    _sign, digits, exponent = Decimal(repr(abs(value))).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    dp = len(digits) + int(exponent)
    if text == "0":
        dp = 1
    return text, dp


def _go_exponent(text: str) -> str:
    """Python writes 1e+06 too, but 1e+100 and 1e-05 the same way Go does; keep 2+ digits."""
    mantissa, _, exp = text.partition("e")
    sign = exp[0] if exp[:1] in "+-" else "+"
    digits = exp.lstrip("+-").lstrip("0").rjust(2, "0")
    return f"{mantissa}e{sign}{digits}"


def sprint_value(value: Any, plus: bool = False) -> str:
    """%v."""
    if value is NO_VALUE:
        return "<no value>"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return value
    stringer = getattr(value, "String", None)
    if callable(stringer):
        return str(stringer())
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(sprint_value(v, plus) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: _sort_key(kv[0]))
        pairs = (f"{sprint_value(k)}:{sprint_value(v, plus)}" for k, v in items)
        return "map[" + " ".join(pairs) + "]"
    if isinstance(value, bytes):
        return "[" + " ".join(str(b) for b in value) + "]"
    fields = struct_fields(value)
    if plus:
        return "{" + " ".join(f"{k}:{sprint_value(v, plus)}" for k, v in fields) + "}"
    return "{" + " ".join(sprint_value(v) for _, v in fields) + "}"


def _sort_key(key: Any) -> tuple[int, Any]:
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        return (0, key)
    return (1, str(key))


def _check_size(size: int) -> None:
    """Refuse formatted text beyond `MAX_OUTPUT` characters, counted as it is built.

    Raises:
        ValueError: `size` exceeds `MAX_OUTPUT`.
    """
    if size > MAX_OUTPUT:
        raise ValueError(f"formatted text exceeds {MAX_OUTPUT} characters")


def sprint(*args: Any) -> str:
    """fmt.Sprint: a space between operands when neither side is a string.

    Raises:
        ValueError: the text would exceed `MAX_OUTPUT` characters (counted operand by
            operand, before the join: a short call can name one long string many times).
    """
    out: list[str] = []
    size = 0
    for i, arg in enumerate(args):
        if i > 0 and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out.append(" ")
            size += 1
        out.append(sprint_value(arg))
        size += len(out[-1])
        _check_size(size)
    return "".join(out)


def sprintln(*args: Any) -> str:
    """fmt.Sprintln: operands separated by spaces, and a newline.

    Raises:
        ValueError: the text would exceed `MAX_OUTPUT` characters (as `sprint`).
    """
    out: list[str] = []
    size = 0
    for arg in args:
        out.append(sprint_value(arg))
        size += len(out[-1]) + 1
        _check_size(size)
    return " ".join(out) + "\n"


# ------------------------------------------------------------------------------- Sprintf


def _bad(verb: str, arg: Any) -> str:
    if arg is None or arg is NO_VALUE:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({go_type(arg)}={sprint_value(arg)})"


def _pad(text: str, width: int, minus: bool, zero: bool) -> str:
    if width <= len(text):
        return text
    if minus:
        return text.ljust(width)
    if zero:
        sign = text[0] if text[:1] in "+-" else ""
        return sign + text[len(sign) :].rjust(width - len(sign), "0")
    return text.rjust(width)


def _format_one(verb: str, arg: Any, flags: str, prec: int) -> str:
    plus, sharp, space = "+" in flags, "#" in flags, " " in flags
    if isinstance(arg, (list, tuple)) and verb not in "vTq" and not (verb in "xX" and not arg):
        elements: list[str] = []
        size = 0
        for v in arg:  # each element may be 10^7 wide: count before the list is joined
            elements.append(_format_one(verb, v, flags, prec))
            size += len(elements[-1]) + 1
            _check_size(size)
        return "[" + " ".join(elements) + "]"
    if verb == "v":
        if isinstance(arg, float) and prec >= 0:
            return format_float(arg, "g", prec)
        if sharp and isinstance(arg, str):
            return go_quote(arg)
        return sprint_value(arg, plus)
    if verb == "T":
        return go_type(arg)
    if isinstance(arg, bool):
        return ("true" if arg else "false") if verb == "t" else _bad(verb, arg)
    if isinstance(arg, int):
        sign = "+" if plus and arg >= 0 else (" " if space and arg >= 0 else "")
        if verb == "d":
            return sign + str(arg)
        if verb in "xXob":
            base = {"x": "x", "X": "X", "o": "o", "b": "b"}[verb]
            body = format(abs(arg), base)
            prefix = {"x": "0x", "X": "0X", "o": "0", "b": ""}[verb] if sharp else ""
            return ("-" if arg < 0 else sign) + prefix + body
        if verb == "c":
            return chr(arg)
        if verb == "q":
            return "'" + go_quote(chr(arg))[1:-1].replace("\\\"", '"').replace("'", "\\'") + "'"
        if verb == "U":
            return f"U+{arg:04X}"
        if verb in "eEfFgG":
            return _bad(verb, arg)
        return _bad(verb, arg)
    if isinstance(arg, float):
        sign = "+" if plus and arg >= 0 else (" " if space and arg >= 0 else "")
        if verb in "fF":
            return sign + format_float(arg, "f", 6 if prec < 0 else prec)
        if verb in "eE":
            text = format_float(arg, "e", 6 if prec < 0 else prec)
            return sign + (text.upper() if verb == "E" else text)
        if verb in "gG":
            text = format_float(arg, "g", prec)
            return sign + (text.upper() if verb == "G" else text)
        return _bad(verb, arg)
    if isinstance(arg, str):
        if verb == "s":
            return arg if prec < 0 else arg[:prec]
        if verb == "q":
            if sharp and "`" not in arg:
                return "`" + arg + "`"
            return go_quote(arg if prec < 0 else arg[:prec])
        if verb in "xX":
            data = arg.encode()
            text = data.hex() if verb == "x" else data.hex().upper()
            return text
        return _bad(verb, arg)
    if arg is None or arg is NO_VALUE:
        return "<nil>" if verb in "sv" and arg is NO_VALUE else _bad(verb, arg)
    if verb == "s":
        stringer = getattr(arg, "String", None)
        if callable(stringer):
            return str(stringer())
        if isinstance(arg, dict):
            return sprint_value(arg)
        return sprint_value(arg)
    if verb in "dxXq" and isinstance(arg, dict):
        items = sorted(arg.items(), key=lambda kv: _sort_key(kv[0]))
        return "map[" + " ".join(
            f"{_format_one(verb, k, flags, prec)}:{_format_one(verb, v, flags, prec)}"
            for k, v in items
        ) + "]"
    return _bad(verb, arg)


def _too_large(x: int) -> bool:
    """fmt/print.go's `tooLarge`: a width or precision beyond ±10^6 is refused."""
    return x > FMT_MAX_NUMBER or x < -FMT_MAX_NUMBER


def _parse_num(fmt: str, i: int, end: int) -> tuple[int, int]:
    """fmt's `parsenum`: the number at `i` (-1 if none) and the index after it.

    Go looks at the number before adding each digit; once it is too large the rest of the
    format is consumed (`%!(NOVERB)` follows), so a literal width stays below ~10^7.
    """
    num, start = 0, i
    while i < end and "0" <= fmt[i] <= "9":
        if _too_large(num):
            return -1, end
        num = num * 10 + ord(fmt[i]) - 48
        i += 1
    return (num if i > start else -1), i


def _int_from_arg(args: tuple[Any, ...], argi: int) -> tuple[int | None, int]:
    """fmt's `intFromArg`: an int operand for `*` (None when missing, not an int, or too
    large), and the next operand's index (the operand is used up either way)."""
    if argi >= len(args):
        return None, argi
    value = args[argi]
    if isinstance(value, bool) or not isinstance(value, int) or _too_large(value):
        return None, argi + 1
    return value, argi + 1


def sprintf(fmt: str, *args: Any) -> str:
    """fmt.Sprintf with the verbs templates use: v +v #v T t d b o x X c q U e E f F g G s %."""
    out: list[str] = []
    argi = 0
    i = 0
    size = 0  # characters formatted for verbs: each is bounded, their number is not
    end = len(fmt)
    while i < end:
        ch = fmt[i]
        if ch != "%":
            j = fmt.find("%", i)
            j = end if j < 0 else j
            out.append(fmt[i:j])
            i = j
            continue
        i += 1
        flags = ""
        while i < end and fmt[i] in "+-# 0":
            flags += fmt[i]
            i += 1
        minus = "-" in flags
        width = -1
        if i < end and fmt[i] == "*":
            i += 1
            star, argi = _int_from_arg(args, argi)
            if star is None:
                out.append("%!(BADWIDTH)")
            elif star < 0:  # a negative width pads on the right, as the '-' flag does
                width, minus = -star, True
            else:
                width = star
        else:
            width, i = _parse_num(fmt, i, end)
        prec = -1
        if i + 1 < end and fmt[i] == ".":
            i += 1
            if fmt[i] == "*":
                i += 1
                got, argi = _int_from_arg(args, argi)
                if got is None or got < 0:  # Go: a negative precision makes no sense
                    out.append("%!(BADPREC)")
                else:
                    prec = got
            else:
                prec, i = _parse_num(fmt, i, end)
                prec = max(prec, 0)  # "%.f" is precision 0
        if i >= end:
            out.append("%!(NOVERB)")
            break
        verb = fmt[i]
        i += 1
        if verb == "%":
            out.append("%")
            continue
        if argi >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = args[argi]
        argi += 1
        text = _format_one(verb, arg, flags, prec)
        out.append(_pad(text, width, minus, "0" in flags and not minus and verb not in "sqvT"))
        size += len(out[-1])
        _check_size(size)
    if argi < len(args):
        extra = ", ".join(
            "<nil>" if a is None else f"{go_type(a)}={sprint_value(a)}" for a in args[argi:]
        )
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)
