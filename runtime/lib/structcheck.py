"""Plain data (TOML, HCL blocks) checked against a msgspec `Struct`, every problem in the
user's words.

`msgspec.convert` stops at the first problem and speaks of its own types: "Expected `array`,
got `str` - at `$.drivers.allow`". A user who wrote `allow = "raw_exec"` needs "must be a list
of strings, got a string "raw_exec"", on the key they wrote, and every other mistake of the
same file at once. `check` walks the data next to the struct's annotations and says so; it
reports, it never converts: the caller converts once `check` found nothing (so `__post_init__`
checks still run, and anything this walk does not understand still gets msgspec's word).

What lives here: `check`, `Problem`, the descriptions of types and values. The agent config
(runtime/agent/config.py, TOML: "keys" in "tables") and the drivers' task `config` blocks
(runtime/jobspec/rules.py: "fields" in "blocks") use it with their own vocabulary. It loads
nothing heavy: the agent imports it on its way to a listening API.

Invariants: a path is the keys and list indexes from the top, as the data has them; problems
come in the data's order; an unknown key names the closest known one (difflib) when there is
one.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Final

import msgspec


@dataclass(frozen=True)
class Problem:
    """One thing wrong: where (keys and indexes from the top) and what, in words."""

    path: tuple[str | int, ...]
    message: str
    #: The message names the last key of `path` itself (`unknown key "prot"`).
    names_key: bool = False

    def where(self) -> str:
        """The path as a user writes it (`drivers.allow`), less a key the message names."""
        return ".".join(str(p) for p in (self.path[:-1] if self.names_key else self.path))

    def render(self, file: str) -> str:
        where = self.where()
        return f"{file}: {where}: {self.message}" if where else f"{file}: {self.message}"


@dataclass(frozen=True)
class Vocabulary:
    """The words of the file format: TOML has keys and tables, a jobspec fields and blocks."""

    key: str = "key"
    mapping: str = "a table"


TOML: Final = Vocabulary()

_SCALARS: Final[dict[Any, tuple[str, str]]] = {
    str: ("a string", "strings"),
    int: ("a whole number", "whole numbers"),
    float: ("a number", "numbers"),
    bool: ("true or false", "true or false values"),
}


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (types.UnionType, typing.Union)


def _strip(tp: Any) -> Any:
    """`T | None` → T, `Annotated[T, …]` → T (None is always "not set" here)."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = _args(tp)[0]
        elif _is_union(tp) and type(None) in _args(tp):
            rest = [a for a in _args(tp) if a is not type(None)]
            tp = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
        else:
            return tp


def describe(tp: Any, vocabulary: Vocabulary = TOML, *, plural: bool = False) -> str:
    """What a value of type `tp` is, in words: "a list of strings"."""
    tp = _strip(tp)
    if tp in _SCALARS:
        return _SCALARS[tp][1 if plural else 0]
    origin = typing.get_origin(tp)
    if origin is list:
        return ("lists of " if plural else "a list of ") + describe(_args(tp)[0], vocabulary,
                                                                 plural=True)
    if origin is dict or (isinstance(tp, type) and issubclass(tp, msgspec.Struct)):
        name = vocabulary.mapping.removeprefix("a ").removeprefix("an ")
        if origin is dict and _strip(_args(tp)[1]) is not Any:
            of = describe(_args(tp)[1], vocabulary, plural=True)
            return f"{name}s of {of}" if plural else f"{vocabulary.mapping} of {of}"
        return f"{name}s" if plural else vocabulary.mapping
    if _is_union(tp):
        return " or ".join(describe(a, vocabulary, plural=plural) for a in _args(tp))
    return "values" if plural else "a value"


def shown(value: Any, vocabulary: Vocabulary = TOML) -> str:
    """A value as a message quotes it: `a string "raw_exec"`, `a list`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"a number {value}"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return f"a string {text if len(text) <= 40 else text[:37] + '…'}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return vocabulary.mapping
    if value is None:
        return "nothing"
    return f"a {type(value).__name__}"


def _fits(value: Any, tp: Any) -> bool:
    """Whether `value` is of the scalar type `tp` (a bool is no number here)."""
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def unknown_key(key: str, known: list[str], vocabulary: Vocabulary = TOML) -> str:
    """`unknown key "prot"; did you mean "port"?`"""
    message = f'unknown {vocabulary.key} "{key}"'
    # difflib misses a key written without its prefix (`ports` for `reserved_ports`).
    close = difflib.get_close_matches(key, known, n=1) or [
        k for k in known if len(key) >= 4 and key in k][:1]
    return message + (f'; did you mean "{close[0]}"?' if close else "")


def check(data: Any, tp: Any, vocabulary: Vocabulary = TOML,
          path: tuple[str | int, ...] = ()) -> list[Problem]:
    """Every way `data` does not fit `tp` (a Struct, or any annotation msgspec knows).

    Args:
        data: plain data as a parser gave it (dicts, lists, scalars).
        tp: the type `data` should convert to.
        vocabulary: the format's words for keys and mappings.
        path: where `data` is, prefixed to every problem's path.

    Returns:
        The problems, in the data's order; empty if `msgspec.convert` would get past the
        types (its `__post_init__` checks are the caller's to run).
    """
    out: list[Problem] = []
    _check(data, tp, vocabulary, path, out)
    return out


def _check(value: Any, tp: Any, vocabulary: Vocabulary, path: tuple[str | int, ...],
           out: list[Problem]) -> None:
    if value is None and (_is_union(_strip_annotated(tp))
                          and type(None) in _args(_strip_annotated(tp))):
        return
    tp = _strip(tp)
    if tp is Any:
        return
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        _check_struct(value, tp, vocabulary, path, out)
    elif origin is list:
        if not isinstance(value, list):
            out.append(Problem(path, f"must be {describe(tp, vocabulary)}, "
                                     f"got {shown(value, vocabulary)}"))
            return
        for i, item in enumerate(value):
            _check(item, _args(tp)[0], vocabulary, (*path, i), out)
    elif origin is dict:
        if not isinstance(value, dict):
            out.append(Problem(path, f"must be {describe(tp, vocabulary)}, "
                                     f"got {shown(value, vocabulary)}"))
            return
        for key, item in value.items():
            _check(item, _args(tp)[1], vocabulary, (*path, key), out)
    elif tp in _SCALARS:
        if not _fits(value, tp):
            out.append(Problem(path, f"must be {describe(tp, vocabulary)}, "
                                     f"got {shown(value, vocabulary)}"))
    elif _is_union(tp) and not any(not check(value, a, vocabulary) for a in _args(tp)):
        out.append(Problem(path, f"must be {describe(tp, vocabulary)}, "
                                 f"got {shown(value, vocabulary)}"))
    # Anything else (literals, enums, …) is left to msgspec.convert.


def _strip_annotated(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = _args(tp)[0]
    return tp


def _check_struct(value: Any, struct: type[msgspec.Struct], vocabulary: Vocabulary,
                  path: tuple[str | int, ...], out: list[Problem]) -> None:
    if not isinstance(value, dict):
        out.append(Problem(path, f"must be {vocabulary.mapping}, got {shown(value, vocabulary)}"))
        return
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
    for key, item in value.items():
        info = fields.get(key)
        if info is None:
            out.append(Problem((*path, key), unknown_key(str(key), sorted(fields), vocabulary),
                               names_key=True))
            continue
        _check(item, info.type, vocabulary, (*path, key), out)
    for name, info in fields.items():
        if info.required and name not in value:
            out.append(Problem(path, f'missing the required {vocabulary.key} "{name}"'))
