"""consul-template's functions as Nomad's `template` block offers them (consul-template's
`template/funcs.go`, the Nomad-native subset plus the helpers jobs use most).

Lookups of live data (`nomadService`, `nomadServices`, `nomadVar`, `nomadVarList`,
`nomadVarExists`) go through a `Lookups` object the caller supplies for one render: it answers
from data fetched before the render and records what the render asked for. A lookup it has
no answer for yet returns None; the function then yields an empty value and the render counts
as incomplete, which is consul-template's two-pass discovery (render, fetch what was missing,
render again). The dependency names are consul-template's (`nomad.service(web)`,
`nomad.var.block(path@default.global)`), so Nomad's "Missing: ..." events read the same.

Results have consul-template's Go shapes: `NomadService{ID Name Namespace Node Datacenter JobID
AllocID Tags Address Port}`, `NomadServicesSnippet{Name Tags}`, `NomadVarItems` (a map from
item key to `NomadVarItem{Key Value}` with the methods Keys, Values, Tuples, Metadata, Parent)
and `NomadVarMeta{Namespace Path CreateIndex ModifyIndex CreateTime ModifyTime}`.

Patterns are Go's RE2 (`goregexp`), never `re`, whose backtracking a job's pattern could make
run for hours. Functions whose result can be a product of their inputs (`join`, `replaceAll`,
`regexReplaceAll`) refuse a result beyond `limits.MAX_OUTPUT` before building it; functions
that make an object per element of their result (`split`, `parseJSON`) charge the elements to
the step budget as they make them (`limits.ELEMENT_STEPS`).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol

from yurt.runtime.gotemplate.builtins import check_size
from yurt.runtime.gotemplate.exec import ArgTypeError, FuncError, execute_template
from yurt.runtime.gotemplate.gofmt import NO_VALUE, format_float, go_type, sprint_value
from yurt.runtime.gotemplate.limits import ELEMENT_STEPS, charge
from yurt.runtime.gotemplate.regexp_funcs import match_string, replace_all_string

_SERVICE_QUERY: Final = re.compile(r"\A(?:(?P<tag>[\w\-.]+)\.)?(?P<name>[\w\-/]+)"
                                   r"(?:@(?P<region>[\w.\-]+))?\Z")


@dataclass
class NomadService:
    GO_TYPE: ClassVar[str] = "*dependency.NomadService"
    ID: str = ""
    Name: str = ""
    Namespace: str = "default"
    Node: str = ""
    Datacenter: str = ""
    Address: str = ""
    Port: int = 0
    Tags: list[str] = field(default_factory=list)
    JobID: str = ""
    AllocID: str = ""


@dataclass
class NomadServicesSnippet:
    GO_TYPE: ClassVar[str] = "*dependency.NomadServicesSnippet"
    Name: str = ""
    Tags: list[str] = field(default_factory=list)


@dataclass
class NomadVarMeta:
    GO_TYPE: ClassVar[str] = "*dependency.NomadVarMeta"
    Namespace: str = ""
    Path: str = ""
    CreateIndex: int = 0
    ModifyIndex: int = 0
    CreateTime: int = 0
    ModifyTime: int = 0


@dataclass
class NomadVarItem:
    GO_TYPE: ClassVar[str] = "dependency.NomadVarItem"
    Key: str = ""
    Value: str = ""

    def String(self) -> str:
        return self.Value


class NomadVarItems(dict[str, NomadVarItem]):
    """A variable's items by key; ranges in key order like any Go map."""

    GO_TYPE: ClassVar[str] = "dependency.NomadVarItems"

    def __init__(self, items: Mapping[str, str], meta: NomadVarMeta) -> None:
        super().__init__({k: NomadVarItem(k, v) for k, v in items.items()})
        self._meta = meta

    def Keys(self) -> list[str]:
        return sorted(self)

    def Values(self) -> list[NomadVarItem]:
        return [self[k] for k in sorted(self)]

    def Tuples(self) -> list[NomadVarItem]:
        return self.Values()

    def Metadata(self) -> NomadVarMeta:
        return self._meta

    def Parent(self) -> NomadVarItems:
        return self


class Lookups(Protocol):
    """Live data for one render; None = not fetched yet (the render is incomplete)."""

    def services(self, name: str, dep: str) -> list[NomadService] | None: ...
    def service_names(self, dep: str) -> list[NomadServicesSnippet] | None: ...
    def variable(self, path: str, dep: str) -> NomadVarItems | None: ...
    def variable_list(self, prefix: str, dep: str) -> list[NomadVarMeta] | None: ...
    def variable_exists(self, path: str, dep: str) -> bool | None: ...


def want_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ArgTypeError(f"wrong type for value; expected string; got {go_type(value)}")
    return value


# --------------------------------------------------------------------------- Go JSON


def go_json(value: Any, indent: str | None = None, level: int = 0,
            spent: list[int] | None = None) -> str:
    """encoding/json's Marshal: sorted map keys, Go float text, HTML-safe escapes.

    Indentation grows with depth, so pretty JSON of a deep value is a product of its size
    and its depth: `spent` (one cell, shared down the recursion) counts the indentation
    written, refused beyond `MAX_OUTPUT` before it is built. Each element of a list or map
    is charged (`ELEMENT_STEPS`): encoding one is a Python call and a string, ~0.5 µs, which
    the evaluator's charge for the data (a step per 16 characters) undercounts tenfold.
    """
    if value is None or value is NO_VALUE:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        digits = format_float(value, "g")
        if "e" in digits and -7 < int(digits.split("e")[1]) < 21:
            digits = format_float(value, "f")
        return digits.replace("e-0", "e-").replace("e+0", "e+")
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                        ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
            text = text.replace(ch, esc)
        return text
    if isinstance(value, NomadVarItem):
        value = {"Key": value.Key, "Value": value.Value}
    if isinstance(value, (list, tuple, dict)):
        charge(len(value) * ELEMENT_STEPS)
    pad = inner = ""
    if indent is not None and isinstance(value, (list, tuple, dict)) and value:
        pad, inner = "\n" + indent * level, "\n" + indent * (level + 1)
        spent = spent if spent is not None else [0]
        spent[0] += len(inner) * len(value) + len(pad)
        check_size(spent[0])
    sep = ":" if indent is None else ": "
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        body = ",".join(inner + go_json(v, indent, level + 1, spent) for v in value)
        return "[" + body + pad + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        body = ",".join(inner + go_json(str(k), None) + sep
                        + go_json(value[k], indent, level + 1, spent)
                        for k in sorted(value, key=str))
        return "{" + body + pad + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # dataclasses.fields, not __dataclass_fields__: that one lists GO_TYPE too.
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return go_json(fields, indent, level, spent)
    raise FuncError(f"json: unsupported type: {go_type(value)}")


def _from_json(value: Any) -> Any:
    """encoding/json into interface{}: every number is a float64.

    Each container's elements are charged (`ELEMENT_STEPS`) before they are converted: a
    value per element is made here, in Python, and lives as long as the variable that
    holds the result.
    """
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        charge(len(value) * ELEMENT_STEPS)
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        charge(len(value) * ELEMENT_STEPS)
        return {k: _from_json(v) for k, v in value.items()}
    return value


def parse_json(s: Any) -> Any:
    text = want_str(s)
    if text == "":
        return {}
    try:
        return _from_json(json.loads(text))
    except json.JSONDecodeError as e:
        raise FuncError(e.msg) from None


# --------------------------------------------------------------------------- strings


def split(sep: Any, s: Any) -> list[str]:
    """strings.Split of the trimmed text. Its pieces are charged (`ELEMENT_STEPS` each)
    before they are made: a string object per piece, ~50-90 bytes even for one character,
    which a step per `DATA_PER_STEP` characters would let a variable hold by the million."""
    s, sep = want_str(s), want_str(sep)
    s = s.strip()
    if not s:
        return []
    charge((s.count(sep) + 1 if sep else len(s)) * ELEMENT_STEPS)
    return s.split(sep) if sep else list(s)


def join(sep: Any, items: Any) -> str:
    glue = want_str(sep)
    if not isinstance(items, (list, tuple)):
        raise ArgTypeError(f"wrong type for value; expected []string; got {go_type(items)}")
    parts = [sprint_value(i) for i in items]
    check_size(sum(map(len, parts)) + len(glue) * max(len(parts) - 1, 0))
    return glue.join(parts)


def replace_all(old: Any, new: Any, s: Any) -> str:
    text, old, new = want_str(s), want_str(old), want_str(new)
    count = text.count(old)  # an empty `old` matches len(text) + 1 times, as in Go
    check_size(len(text) + count * (len(new) - len(old)))
    return text.replace(old, new)


def contains(needle: Any, haystack: Any) -> bool:
    """consul-template's `contains`, meant for pipes: `.Tags | contains "x"`."""
    if isinstance(haystack, (list, tuple)):
        return any(type(v) is type(needle) and v == needle for v in haystack)
    if isinstance(haystack, str) and isinstance(needle, str):
        return needle in haystack
    return False


#: Go's layout elements, in the order they are tried at each position, and their strftime.
_LAYOUT_TOKENS: Final = (
    ("2006", "%Y"), ("January", "%B"), ("Jan", "%b"), ("Monday", "%A"), ("Mon", "%a"),
    ("MST", "%Z"), ("Z07:00", "Z"), ("-0700", "%z"), ("01", "%m"), ("02", "%d"), ("15", "%H"),
    ("03", "%I"), ("04", "%M"), ("05", "%S"), ("PM", "%p"), ("06", "%y"),
)  # fmt: skip
#: The tokens as one alternation (ours, fixed: `re` is safe here), tried in that order.
_LAYOUT: Final = re.compile("|".join(re.escape(go) for go, _ in _LAYOUT_TOKENS))


def _go_layout(layout: str, now: time.struct_time) -> str:
    """The layout with each of Go's elements replaced by its value at `now`.

    One C scan with a dict lookup per element, each value formatted once: a loop trying
    every element at every character ran ~1 µs a character, twenty times what the
    evaluator charges for the layout's data; the elements are charged here (a step per
    character: at most one element per two, ~0.4 µs each).
    """
    charge(len(layout))
    values = {go: "Z" if py == "Z" else time.strftime(py, now) for go, py in _LAYOUT_TOKENS}
    return _LAYOUT.sub(lambda m: values[m.group()], layout)


def make_timestamp(clock: Callable[[], float]) -> Callable[..., str]:
    def timestamp(*layout: Any) -> str:
        if len(layout) > 1:
            raise FuncError("timestamp: wrong number of arguments, expected 0 or 1, "
                            f"got {len(layout)}")
        now = clock()
        if not layout:
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        fmt = want_str(layout[0])
        if fmt == "unix":
            return str(int(now))
        return _go_layout(fmt, time.gmtime(now))

    return timestamp


def _b64decode(s: Any) -> str:
    try:
        return base64.b64decode(want_str(s), validate=True).decode()
    except (ValueError, UnicodeDecodeError) as e:
        raise FuncError(f"base64Decode: {e}") from None


def _parse_int(s: Any) -> int:
    try:
        value = int(want_str(s), 0)
    except ValueError:
        raise FuncError(f'strconv.ParseInt: parsing "{s}": invalid syntax') from None
    if not -(1 << 63) <= value < 1 << 63:
        raise FuncError(f'strconv.ParseInt: parsing "{s}": value out of range')
    return value


def _int64(value: Any) -> Any:
    """Go's int64 arithmetic wraps; Python's ints grow without end, so that `$x = multiply
    $x $x` in a loop would allocate gigabytes — wrap as Go does."""
    if isinstance(value, int) and not isinstance(value, bool):
        return ((value + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)
    return value


def _parse_float(s: Any) -> float:
    try:
        return float(want_str(s))
    except ValueError:
        raise FuncError(f'strconv.ParseFloat: parsing "{s}": invalid syntax') from None


def _parse_bool(s: Any) -> bool:
    text = want_str(s)
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise FuncError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def _arith(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def fn(b: Any, a: Any) -> Any:  # consul-template's math takes its operands reversed
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            raise FuncError(f"unknown type for {sprint_value(a)!r} ({go_type(a)})")
        return _int64(op(a, b))

    return fn


def _divide(a: Any, b: Any) -> Any:
    if b == 0:
        raise FuncError("divide: division by 0")
    if isinstance(a, int) and isinstance(b, int):
        quotient = abs(a) // abs(b)  # Go's integer division truncates toward zero
        return _int64(quotient if (a < 0) == (b < 0) else -quotient)
    return a / b


def _rendezvous(count: Any, key: Any, services: list[NomadService]) -> list[NomadService]:
    def weight(s: NomadService) -> bytes:
        return hashlib.sha256(f"{key}{s.ID}".encode()).digest()

    return sorted(services, key=weight)[: int(count)]


def consul_funcs(env: Mapping[str, str], lookups: Lookups, namespace: str = "default",
                 region: str = "global", clock: Callable[[], float] = time.time
                 ) -> dict[str, Callable[..., Any]]:
    """The functions for one render: `env` is the task's environment (Nomad sandboxes `env`
    to it), `lookups` answers and records the live data."""

    def nomad_service(*args: Any) -> list[NomadService]:
        if len(args) not in (1, 3):
            raise FuncError(f"nomadService: expected 1 or 3 arguments, got {len(args)}")
        query = want_str(args[-1])
        match = _SERVICE_QUERY.match(query)
        if match is None:
            raise FuncError(f'nomadService: invalid format: "{query}"')
        found = lookups.services(match["name"], f"nomad.service({query})")
        services = [s for s in found or [] if not match["tag"] or match["tag"] in s.Tags]
        if len(args) == 3:
            return _rendezvous(args[0], args[1], services)
        return services

    def nomad_services(*args: Any) -> list[NomadServicesSnippet]:
        return lookups.service_names(f"nomad.services(@{namespace}.{region})") or []

    def nomad_var(path: Any) -> NomadVarItems:
        text = want_str(path)
        found = lookups.variable(text, f"nomad.var.block({text}@{namespace}.{region})")
        return found if found is not None else NomadVarItems({}, NomadVarMeta(namespace, text))

    def nomad_var_list(*prefix: Any) -> list[NomadVarMeta]:
        text = want_str(prefix[0]) if prefix else ""
        return lookups.variable_list(text, f"nomad.var.list({text}@{namespace}.{region})") or []

    def nomad_var_exists(path: Any) -> bool:
        text = want_str(path)
        return bool(lookups.variable_exists(text, f"nomad.var.get({text}@{namespace}.{region})"))

    def env_lookup(name: Any) -> str:
        return env.get(want_str(name), "")

    return {
        "env": env_lookup,
        "executeTemplate": execute_template,
        "nomadService": nomad_service,
        "nomadServices": nomad_services,
        "nomadVar": nomad_var,
        "nomadVarList": nomad_var_list,
        "nomadVarExists": nomad_var_exists,
        "toJSON": lambda v: go_json(v),
        "toJSONPretty": lambda v: go_json(v, "  "),
        "parseJSON": parse_json,
        "split": split,
        "join": join,
        "replaceAll": replace_all,
        "timestamp": make_timestamp(clock),
        "toLower": lambda s: want_str(s).lower(),
        "toUpper": lambda s: want_str(s).upper(),
        "toTitle": lambda s: want_str(s).title(),
        "trimSpace": lambda s: want_str(s).strip(" \t\n\r\v\f"),
        "trim": lambda cut, s: want_str(s).strip(want_str(cut)),
        "trimPrefix": lambda p, s: want_str(s).removeprefix(want_str(p)),
        "trimSuffix": lambda p, s: want_str(s).removesuffix(want_str(p)),
        "contains": contains,
        "in": lambda haystack, needle: contains(needle, haystack),
        "regexMatch": lambda rx, s: match_string(want_str(rx), want_str(s)),
        "regexReplaceAll": lambda rx, repl, s: replace_all_string(
            want_str(rx), want_str(repl), want_str(s)),
        "base64Encode": lambda s: base64.b64encode(want_str(s).encode()).decode(),
        "base64Decode": _b64decode,
        "parseInt": _parse_int,
        "parseFloat": _parse_float,
        "parseBool": _parse_bool,
        "add": _arith(lambda a, b: a + b),
        "subtract": _arith(lambda a, b: a - b),
        "multiply": _arith(lambda a, b: a * b),
        "divide": lambda b, a: _divide(a, b),
    }
