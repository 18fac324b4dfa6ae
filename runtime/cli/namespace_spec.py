"""`namespace apply` from a specification file, as Nomad's command/namespace_apply.go reads
it: the argument is `-` (stdin) or an existing file, HCL (`parseNamespaceSpec`: `name`,
`description`, `quota`, `meta {}`, `capabilities {}`, `node_pool_config {}`) or, with
`-json`, the API's Namespace object; anything else names the namespace. The spec is sent as
written: the flags are ignored with a file, with Nomad's warning. Pure but `read_spec`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Final

#: HCL names whose JSON name is not the plain CamelCase of the words.
_RENAMED: Final = {"node_pool_config": "NodePoolConfiguration"}
#: Blocks whose keys are the user's own (kept as written), not field names.
_FREE_KEYS: Final = frozenset({"meta", "required_extra_claims", "optional_extra_claims"})


class NamespaceSpecError(Exception):
    """A specification that cannot be read."""


def is_spec_argument(arg: str) -> bool:
    """Nomad's test: `-`, or a path to something that exists and is no directory."""
    return arg == "-" or (os.path.exists(arg) and not os.path.isdir(arg))


def _camel(name: str) -> str:
    return _RENAMED.get(name) or "".join(w[:1].upper() + w[1:] for w in name.split("_"))


def _convert(value: Any, free: bool) -> Any:
    """HCL's snake_case keys into the API's names, through blocks (a block python-hcl2 lists
    becomes its one object)."""
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        merged: dict[str, Any] = {}
        for block in value:
            merged.update(block)
        value = merged
    if isinstance(value, dict):
        return {k if free else _camel(k): _convert(v, not free and k in _FREE_KEYS)
                for k, v in value.items()}
    return value


def parse_spec(text: str, as_json: bool, source: str) -> dict[str, Any]:
    """The specification as the API's Namespace object.

    Raises:
        NamespaceSpecError: Nomad's "Failed to parse" / "Error parsing" texts.
    """
    if as_json:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise NamespaceSpecError(f"Failed to parse namespace: {e}") from None
        if not isinstance(doc, dict):
            raise NamespaceSpecError("Failed to parse namespace: not a JSON object")
        return doc
    from yurt.runtime.errors import JobSpecError
    from yurt.runtime.jobspec.syntax import _load_hcl

    try:
        raw = _load_hcl(text, source)[0]
    except JobSpecError as e:
        raise NamespaceSpecError(
            f"Error parsing namespace specification: {e.render()}") from None
    converted: dict[str, Any] = {_camel(k): _convert(v, k in _FREE_KEYS)
                                 for k, v in raw.items()}
    return converted


def read_spec(arg: str, as_json: bool) -> dict[str, Any]:
    """The specification `arg` names (`-`: stdin), parsed."""
    if arg == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(arg, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise NamespaceSpecError(
                f"Failed to read file: {getattr(e, 'strerror', None) or e}") from None
    return parse_spec(text, as_json, "<stdin>" if arg == "-" else arg)
