"""The HCL2 functions a Nomad job file may call (jobspec2/functions.go `Functions`).

What lives here: `functions(base_dir, allow_fs)`, the table `evaluate.Scope` calls into, each
function over plain Python values (see evaluate.py). Arguments are checked and converted as
cty's function specs do (a number given as a string is a number); a bad argument raises
`EvalError` and the caller prefixes the function's name.

functions_extra.py holds the rest of the pure ones (sort, zipmap, sha256, …). Left out of
Nomad's list: bcrypt, rsadecrypt, base64gzip, base64sha*, filesha*, filemd5, filebase64*,
cidrhost/cidrnetmask/cidrsubnet(s), formatdate, timeadd, setproduct, yamlencode, yamldecode,
csvdecode, fileset, pathexpand.

Invariant: file functions read only when `allow_fs` is true (the CLI reading a local job
file; never the HTTP API, as Nomad's `AllowFS` is false there), relative to `base_dir`.
"""

from __future__ import annotations

import base64
import json
import math
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import regex as re  # type: ignore[import-untyped]  # every match runs under REGEX_TIMEOUT

from yurt.runtime.jobspec.evaluate import EvalError, Scope, number, to_string
from yurt.runtime.jobspec.evaluate_tree import render_string
from yurt.runtime.jobspec.functions_extra import EXTRA

#: Seconds one regex function may run: Nomad's RE2 is linear, Python's engine may backtrack.
REGEX_TIMEOUT: Final = 1.0
#: The widest `format` field.
MAX_WIDTH: Final = 4096


def _str(v: Any) -> str:
    return to_string(v)


def _num(v: Any) -> int | float:
    if isinstance(v, bool):
        raise EvalError("a number is required, got bool")
    if isinstance(v, int | float):
        return v
    if isinstance(v, str):
        try:
            return number(float(v)) if any(c in v for c in ".eE") else int(v)
        except ValueError:
            raise EvalError(f"a number is required, got {v!r}") from None
    raise EvalError(f"a number is required, got {type(v).__name__}")


def _list(v: Any) -> list[Any]:
    if isinstance(v, list):
        return v
    raise EvalError("a list is required")


def _map(v: Any) -> dict[str, Any]:
    if isinstance(v, dict):
        return v
    raise EvalError("a map or object is required")


def _format(fmt: Any, *args: Any) -> str:
    fmt, out, i, n = _str(fmt), [], 0, 0
    pos = 0
    while pos < len(fmt):
        c = fmt[pos]
        if c != "%":
            out.append(c)
            pos += 1
            continue
        m = re.match(r"%([-+ #0]*)(\d*)(?:\.(\d+))?([a-zA-Z%])", fmt[pos:])
        if m is None:
            raise EvalError(f"invalid format verb at {pos}")
        flags, width, prec, verb = m.groups()
        pos += m.end()
        if verb == "%":
            out.append("%")
            continue
        if n >= len(args):
            raise EvalError(f"not enough arguments for the format {fmt!r}")
        arg, n = args[n], n + 1
        if verb in "sq":
            s = json.dumps(_str(arg)) if verb == "q" else _str(arg)
            s = s[: int(prec)] if prec else s
        elif verb == "v":
            s = _str(arg) if not isinstance(arg, list | dict) else json.dumps(arg)
        elif verb == "t":
            s = "true" if arg is True else "false"
        elif verb in "dbox":
            s = format(int(_num(arg)), {"d": "d", "b": "b", "o": "o", "x": "x"}[verb])
        elif verb == "X":
            s = format(int(_num(arg)), "X")
        elif verb in "feEgG":
            s = format(float(_num(arg)), f".{prec or 6}{verb}")
        else:
            raise EvalError(f"unsupported format verb %{verb}")
        if width and int(width) > MAX_WIDTH:
            raise EvalError(f"a format width of more than {MAX_WIDTH}")
        if width:
            s = s.ljust(int(width)) if "-" in flags else s.rjust(
                int(width), "0" if "0" in flags else " ")
        out.append(s)
        i += 1
    return "".join(out)


def _formatlist(fmt: Any, *args: Any) -> list[str]:
    lengths = {len(a) for a in args if isinstance(a, list)}
    if len(lengths) > 1:
        raise EvalError("all list arguments must have the same length")
    count = lengths.pop() if lengths else 1
    return [_format(fmt, *[a[i] if isinstance(a, list) else a for a in args])
            for i in range(count)]


def _flatten(v: Any) -> list[Any]:
    out: list[Any] = []
    for item in _list(v):
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


def _distinct(v: Any) -> list[Any]:
    out: list[Any] = []
    for item in _list(v):
        if item not in out:
            out.append(item)
    return out


def _coalesce(*args: Any) -> Any:
    for a in args:
        if a is not None and a != "":
            return a
    raise EvalError("no non-null, non-empty-string arguments")


def _lookup(m: Any, key: Any, *default: Any) -> Any:
    m = _map(m)
    if _str(key) in m:
        return m[_str(key)]
    if default:
        return default[0]
    raise EvalError(f'the map has no key "{_str(key)}" and no default was given')


def _index(lst: Any, value: Any) -> int:
    try:
        return _list(lst).index(value)
    except ValueError:
        raise EvalError("the item is not in the list") from None


def _slice(lst: Any, start: Any, end: Any) -> list[Any]:
    items, a, b = _list(lst), int(_num(start)), int(_num(end))
    if not 0 <= a <= b <= len(items):
        raise EvalError(f"invalid slice [{a}:{b}] of a list of {len(items)}")
    return items[a:b]


def _range(*args: Any) -> list[Any]:
    nums = [_num(a) for a in args]
    start, stop, step = (0, nums[0], 1) if len(nums) == 1 else (
        nums[0], nums[1], nums[2] if len(nums) > 2 else (1 if nums[1] >= nums[0] else -1))
    if step == 0:
        raise EvalError("step must not be zero")
    out, x = [], start
    while (x < stop) if step > 0 else (x > stop):
        out.append(number(x))
        x += step
        if len(out) > 1024:
            raise EvalError("more than 1024 values")
    return out


def _element(lst: Any, i: Any) -> Any:
    items = _list(lst)
    if not items:
        raise EvalError("cannot use element function with an empty list")
    return items[int(_num(i)) % len(items)]


def _regex(pattern: Any, s: Any) -> Any:
    rx = _compile(pattern)
    m = rx.search(_str(s), timeout=REGEX_TIMEOUT)
    if m is None:
        raise EvalError("pattern did not match any part of the given string")
    return _groups(rx, m)


def _groups(rx: Any, m: Any) -> Any:
    if rx.groupindex:
        return {k: m.group(k) for k in rx.groupindex}
    if rx.groups:
        return list(m.groups())
    return m.group(0)


def _regexall(pattern: Any, s: Any) -> list[Any]:
    rx = _compile(pattern)
    return [_groups(rx, m) for m in rx.finditer(_str(s), timeout=REGEX_TIMEOUT)]


def _compile(pattern: Any) -> Any:
    try:
        return re.compile(_str(pattern))
    except re.error as e:
        raise EvalError(f"invalid regular expression: {e}") from None


def _replace(s: Any, old: Any, new: Any) -> str:
    old = _str(old)
    if len(old) > 1 and old.startswith("/") and old.endswith("/"):
        return str(_compile(old[1:-1]).sub(re.sub(r"\$(\d+)", r"\\\1", _str(new)), _str(s),
                                           timeout=REGEX_TIMEOUT))
    return _str(s).replace(old, _str(new))


def _tobool(v: Any) -> Any:
    if v is None or isinstance(v, bool):
        return v
    if v in ("true", "false"):
        return v == "true"
    raise EvalError(f"cannot convert {v!r} to bool")


def _tonumber(v: Any) -> Any:
    return None if v is None else _num(v)


def _tomap(v: Any) -> Any:
    return None if v is None else _map(v)


def _try(*lazies: Any) -> Any:
    for lazy in lazies:
        try:
            return lazy.value()
        except EvalError:
            continue
    raise EvalError("no expression succeeded")


def _can(lazy: Any) -> bool:
    try:
        lazy.value()
    except EvalError:
        return False
    return True


def functions(base_dir: str | None, allow_fs: bool, scope: Scope | None = None
              ) -> dict[str, Callable[..., Any]]:
    """The function table; file functions read under `base_dir` only when `allow_fs`."""

    def path_of(p: Any) -> Path:
        if not allow_fs:
            raise EvalError("filesystem function disabled")
        return Path(base_dir or ".", _str(p))

    def read(p: Any) -> str:
        try:
            return path_of(p).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise EvalError(f"cannot read {_str(p)!r}: {getattr(e, 'strerror', e)}") from None

    def templatefile(p: Any, variables: Any) -> Any:
        from yurt.runtime.jobspec.evaluate import Scope as _Scope

        inner = _Scope({}, None, table, dict(_map(variables)))
        return to_string(render_string(read(p), inner))

    table: dict[str, Callable[..., Any]] = {
        "abs": lambda x: number(abs(_num(x))),
        "abspath": lambda p: os.path.abspath(_str(p)),
        "basename": lambda p: os.path.basename(_str(p)),
        "base64decode": lambda s: base64.b64decode(_str(s), validate=True).decode(),
        "base64encode": lambda s: base64.b64encode(_str(s).encode()).decode(),
        "can": _can,
        "ceil": lambda x: math.ceil(_num(x)),
        "coalesce": _coalesce,
        "coalescelist": lambda *ls: next((lst for lst in ls if _list(lst)), []),
        "concat": lambda *ls: [x for lst in ls for x in _list(lst)],
        "contains": lambda lst, v: v in _list(lst),
        "dirname": lambda p: os.path.dirname(_str(p)) or ".",
        "distinct": _distinct,
        "element": _element,
        "file": read,
        "fileexists": lambda p: path_of(p).is_file(),
        "flatten": _flatten,
        "floor": lambda x: math.floor(_num(x)),
        "format": _format,
        "formatlist": _formatlist,
        "index": _index,
        "join": lambda sep, *ls: _str(sep).join(_str(x) for lst in ls for x in _list(lst)),
        "jsondecode": lambda s: json.loads(_str(s)),
        "jsonencode": lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True),
        "keys": lambda m: sorted(_map(m)),
        "length": lambda v: len(v) if isinstance(v, list | dict | str) else _bad_length(v),
        "lookup": _lookup,
        "lower": lambda s: _str(s).lower(),
        "max": lambda *xs: number(max(_num(x) for x in xs)),
        "merge": lambda *ms: {k: v for m in ms if m is not None for k, v in _map(m).items()},
        "min": lambda *xs: number(min(_num(x) for x in xs)),
        "range": _range,
        "regex": _regex,
        "regexall": _regexall,
        "replace": _replace,
        "slice": _slice,
        "split": lambda sep, s: _str(s).split(_str(sep)),
        "templatefile": templatefile,
        "timestamp": lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "title": lambda s: re.sub(r"\b[a-z]", lambda m: m.group(0).upper(), _str(s)),
        "tobool": _tobool,
        "tolist": lambda v: None if v is None else list(_list(v)),
        "tomap": _tomap,
        "tonumber": _tonumber,
        "toset": lambda v: None if v is None else sorted(_distinct(v), key=json.dumps),
        "tostring": lambda v: None if v is None else _str(v),
        "trim": lambda s, cut: _str(s).strip(_str(cut)),
        "trimprefix": lambda s, p: _str(s).removeprefix(_str(p)),
        "trimspace": lambda s: _str(s).strip(),
        "trimsuffix": lambda s, p: _str(s).removesuffix(_str(p)),
        "try": _try,
        "upper": lambda s: _str(s).upper(),
        "uuidv4": lambda: str(uuid.uuid4()),
        "values": lambda m: [_map(m)[k] for k in sorted(_map(m))],
    }
    table.update(EXTRA)
    return table


def _bad_length(v: Any) -> int:
    raise EvalError("a list, map or string is required")
