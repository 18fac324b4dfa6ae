"""Go's literals as the template parser reads them: `strconv.Unquote` for "…", `…` and '…',
and number literals (decimal, 0x/0o/0b, underscores, floats, hex floats, runes) with Go's
rule for their type: a literal with a '.', an exponent or a 'p' is a float64, else an int.
"""

from __future__ import annotations

from yurt.runtime.gotemplate.tokens import Item, T

_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            "\\": "\\", "'": "'", '"': '"'}


def go_unquote(text: str) -> str:
    """strconv.Unquote for "..." and `...` literals; raises ValueError on bad syntax."""
    if len(text) < 2 or text[0] != text[-1] or text[0] not in "\"`'":
        raise ValueError(text)
    body = text[1:-1]
    if text[0] == "`":
        if "`" in body:
            raise ValueError(text)
        return body.replace("\r", "")
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == text[0] or ch == "\n":
            raise ValueError(text)
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(body):
            raise ValueError(text)
        esc = body[i + 1]
        if esc in _ESCAPES:
            out.append(_ESCAPES[esc])
            i += 2
        elif esc in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[esc]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(text)
            out.append(chr(int(digits, 16)))
            i += 2 + width
        elif esc in "01234567":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or any(c not in "01234567" for c in digits):
                raise ValueError(text)
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            raise ValueError(text)
    return "".join(out)


def number_value(item: Item) -> int | float:
    text = item.val
    if item.typ is T.CHAR_CONSTANT:
        rune = go_unquote('"' + text[1:-1].replace('"', '\\"') + '"') if text != "'\"'" else '"'
        if len(rune) != 1:
            raise ValueError(text)
        return ord(rune)
    if text.endswith("i"):
        raise ValueError(text)
    clean = text.replace("_", "")
    lowered = clean.lower().lstrip("+-")
    is_hex = lowered.startswith("0x")
    if is_hex and "p" not in lowered and "." not in lowered:
        return _int64_or_uint64(int(clean, 16), text)
    if not is_hex and not any(c in lowered for c in ".ep"):
        if len(lowered) > 1 and lowered[0] == "0" and lowered[1] not in "ob":
            return _int64_or_uint64(
                int(clean.replace("0", "0o", 1) if clean[0] == "0" else clean, 0), text)
        return _int64_or_uint64(int(clean, 0), text)
    return float.fromhex(clean) if is_hex else float(clean)


def _int64_or_uint64(value: int, text: str) -> int:
    """Go reads an integer literal as an int64 or a uint64 and refuses a larger one (which
    Python would keep, as a number that may not even print)."""
    if not -(1 << 63) <= value < 1 << 64:
        raise ValueError(text)
    return value
