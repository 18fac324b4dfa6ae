"""`var put` with Nomad's specification files and output formats, and `var list -out`: what
command/var_put.go, var_list.go and var.go (`renderAsHCL`) do.

    yurt var put [options] PATH [@SPEC | -] [key=value]...
    yurt var put [options] @SPEC | - [key=value]...

A whole variable can come from a specification: `@file` (its format from the extension,
`.hcl` or `.json`, else `-in`) or `-` (stdin, in `-in`'s format, JSON by default). The JSON
is the API's Variable (keys matched without regard to case, as Go's decoder does); the HCL has
`namespace`, `path`, `items` and the server's `create_index`, `modify_index`, `create_time`,
`modify_time` (`var init` writes an example). A PATH argument or `-namespace` that differs from
the specification's replaces it and zeroes the indexes and times (Nomad's "copy"); otherwise
the specification's `modify_index` is the check-and-set index, which `-check-index` overrides
and `-force` drops. `key=value` arguments then add (`key=` removes) items. `-verbose` says
each step on stderr, so that stdout keeps only the output. `-out` is Nomad's: `none` (the
"Created variable" line), `json`, `hcl` (what a specification file holds), `table`, or
`go-template` with `-template`; a template with another format, or none with `go-template`,
is refused with Nomad's texts (exit 2).

`var list -out json|table|terse|go-template` (`terse`: the paths, with their namespace when
listing every namespace). Unlike Nomad, the default stays `table` when stdout is no terminal
(yurt's `-json` asks for JSON). Everything pure here but `put` and `list_out`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

from yurt.runtime.cli.output import echo, fail
from yurt.runtime.errors import EXIT_USAGE

PUT_FORMATS: Final = ("go-template", "hcl", "json", "none", "table")
LIST_FORMATS: Final = ("go-template", "json", "table", "terse")
MISSING_TEMPLATE: Final = ("A template must be supplied using '-template' when using "
                           "go-template formatting")
UNEXPECTED_TEMPLATE: Final = ("The '-template' flag is only valid when using 'go-template' "
                              "formatting")
INVALID_IN: Final = 'Invalid value for "-in"; valid values are [hcl, json]'
#: The fields of a specification, by their HCL names, with their JSON names.
_HCL_FIELDS: Final = {"namespace": "Namespace", "path": "Path", "items": "Items",
                      "create_index": "CreateIndex", "modify_index": "ModifyIndex",
                      "create_time": "CreateTime", "modify_time": "ModifyTime"}
_INTEGERS: Final = frozenset({"CreateIndex", "ModifyIndex", "CreateTime", "ModifyTime"})


class SpecError(Exception):
    """A specification that cannot be read, or flags that contradict each other."""


def output_problem(out: str, template: str, formats: tuple[str, ...]) -> str | None:
    """Nomad's `validateOutputFlag`: None when `-out` and `-template` fit together."""
    if out != "go-template" and template:
        return UNEXPECTED_TEMPLATE
    if out not in formats:
        return f'Invalid value for "-out"; valid values are [{", ".join(formats)}]'
    if out == "go-template" and not template:
        return MISSING_TEMPLATE
    return None


def is_spec_ref(arg: str) -> bool:
    """`-` (stdin) or `@file`: a whole specification, not a path or an item."""
    return arg == "-" or arg.startswith("@")


def file_format(name: str) -> str:
    """Nomad's `setParserForFileArg`: the format a specification file's extension names."""
    suffix = Path(name).suffix
    if suffix in (".json", ".hcl"):
        return suffix[1:]
    raise SpecError(f"Unable to determine format of {name}; Use the -in flag to specify it.")


def parse_spec(text: str, fmt: str, source: str) -> dict[str, Any]:
    """A specification's text as the API's Variable (Items always a dict of strings).

    Raises:
        SpecError: not JSON or HCL of a variable; the text says where and why.
    """
    if fmt == "json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"error unmarshaling json: {e}") from None
        if not isinstance(doc, dict):
            raise SpecError("error unmarshaling json: the specification is not an object")
        known = {v.lower(): v for v in _HCL_FIELDS.values()}
        found = {known[k.lower()]: v for k, v in doc.items() if k.lower() in known}
    else:
        from yurt.runtime.errors import JobSpecError
        from yurt.runtime.jobspec.syntax import _load_hcl

        try:
            raw = _load_hcl(text, source)[0]
        except JobSpecError as e:
            raise SpecError(f"error parsing hcl: {e.render()}") from None
        unknown = sorted(set(raw) - set(_HCL_FIELDS))
        if unknown:
            raise SpecError(f'error parsing hcl: invalid key "{unknown[0]}"')
        found = {_HCL_FIELDS[k]: v for k, v in raw.items()}
        items = found.get("Items")
        if isinstance(items, list):  # `items { ... }`, a block: python-hcl2 lists it
            merged: dict[str, Any] = {}
            for block in items:
                merged.update(block if isinstance(block, dict) else {})
            found["Items"] = merged
    for name in _INTEGERS:
        value = found.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(f"{name} must be a non-negative integer, not {value!r}")
    items = found.get("Items") or {}
    if not isinstance(items, dict) or not all(isinstance(v, str) for v in items.values()):
        raise SpecError("Items must map names to strings")
    for name in ("Namespace", "Path"):
        if not isinstance(found.get(name, ""), str):
            raise SpecError(f"{name} must be a string")
    return {**found, "Items": dict(items)}


def make_variable(spec: dict[str, Any] | None, path: str, namespace: str) -> dict[str, Any]:
    """Nomad's `makeVariable`: the specification with the command line's path and namespace
    over it (either differing zeroes the indexes and times), or a new empty variable."""
    if spec is None:
        return {"Path": path, "Namespace": namespace, "Items": {}}
    out = dict(spec)
    reset = False
    if namespace and namespace != out.get("Namespace", ""):
        out["Namespace"], reset = namespace, True
    if path and path != out.get("Path", ""):
        out["Path"], reset = path, True
    if reset:
        out.update(CreateIndex=0, CreateTime=0, ModifyIndex=0, ModifyTime=0)
    return out


def render_hcl(v: dict[str, Any]) -> str:
    """Nomad's `renderAsHCL`: the variable as a specification file holds it."""
    items = v.get("Items") or {}
    pad = max((len(k) for k in items), default=0)
    lines = [f'namespace    = {json.dumps(v.get("Namespace", ""))}',
             f'path         = {json.dumps(v.get("Path", ""))}',
             f'create_index = {v.get("CreateIndex", 0)}  # Set by server',
             f'modify_index = {v.get("ModifyIndex", 0)}  # Set by server; consulted for '
             "check-and-set",
             f'create_time  = {v.get("CreateTime", 0)}   # Set by server',
             f'modify_time  = {v.get("ModifyTime", 0)}   # Set by server',
             "items = {",
             *(f"  {k.rjust(pad)} = {json.dumps(items[k])}" for k in sorted(items)),
             "}"]
    return "\n" + "\n".join(lines) + "\n"


def terse_lines(found: list[dict[str, Any]], namespace: str) -> list[str]:
    """Nomad's `dataToQuietStringSlice`: the paths; with every namespace listed (`*`), each
    with its namespace."""
    if namespace == "*":
        from yurt.runtime.cli.output import format_list

        text = format_list([[v["Namespace"], v["Path"]] for v in found])
        return text.splitlines() if found else []
    return [str(v["Path"]) for v in found]


# --------------------------------------------------------------------------- the commands


def _read_spec(arg: str, in_fmt: str, say: Any, path: str) -> dict[str, Any]:
    """The specification `arg` (`-` or `@file`) names, parsed."""
    try:
        if arg == "-":
            fmt = in_fmt
            say(f"Reading whole {fmt.upper()} variable specification from stdin" if not path
                else f'Creating variable "{path}" using specification from stdin')
            text = sys.stdin.read()
            source = "<stdin>"
        else:
            source = arg[1:]
            fmt = file_format(source)
            say(f'Reading whole {fmt.upper()} variable specification from "{source}"'
                if not path else f'Creating variable "{path}" from specification file "{arg}"')
            try:
                text = Path(source).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                fail(f'Error reading "{source}": {getattr(e, "strerror", None) or e}')
        return parse_spec(text, fmt, source)
    except SpecError as e:
        fail(f"Failed to parse variable data: {e}", EXIT_USAGE)


def put(args: tuple[str, ...], *, ns: str, check_index: int | None, force: bool, in_fmt: str,
        out: str, template: str, verbose: bool) -> None:
    """`yurt var put` (the module's header): build the variable, write it, print it."""
    from yurt.runtime.cli.api_client import api, emit_json
    from yurt.runtime.cli.output import echo_raw, render_template

    def say(message: str) -> None:
        if verbose:
            echo(message, err=True)

    if in_fmt not in ("hcl", "json"):
        fail(INVALID_IN, EXIT_USAGE)
    problem = output_problem(out, template, PUT_FORMATS)
    if problem is not None:
        fail(problem, EXIT_USAGE)
    if len(args) == 1 and not is_spec_ref(args[0]):
        fail("Must supply data", EXIT_USAGE)
    rest = list(args)
    path = ""
    spec = None
    if is_spec_ref(rest[0]):
        spec = _read_spec(rest.pop(0), in_fmt, say, "")
    else:
        path = rest.pop(0).strip().strip("/")
        say(f'Writing to path "{path}"')
        if rest and is_spec_ref(rest[0]) and "=" not in rest[0]:
            spec = _read_spec(rest.pop(0), in_fmt, say, path)
    variable = make_variable(spec, path, ns)
    if not variable.get("Path"):
        fail("Failed to parse variable data: the variable has no path", EXIT_USAGE)
    from yurt.runtime.cli.var_common import (
        _cas_conflict,
        _items,
        _params,
        _print_variable,
        _send,
    )

    for key, value in _items(tuple(rest), keep_empty=True).items():
        if value:
            variable["Items"][key] = value
        elif variable["Items"].pop(key, None) is not None:
            say(f'Removed item "{key}"')
        else:
            say(f'Item "{key}" does not exist, continuing...')
    target = variable["Path"]
    if check_index is not None:
        variable["ModifyIndex"] = check_index
    cas = None if force else int(variable.get("ModifyIndex") or 0)
    body = {k: variable[k] for k in ("Path", "Namespace", "Items") if variable.get(k)}
    body.setdefault("Items", {})
    with api() as client:
        response = _send(client, "PUT", f"/v1/var/{target}",
                         params=_params(variable.get("Namespace") or "",
                                        **({} if cas is None else {"cas": str(cas)})),
                         json=body)
    if response.status_code == 409:
        _cas_conflict(response, cas or 0)
    written = response.json()
    created = f'Created variable "{written["Path"]}" with modify index {written["ModifyIndex"]}'
    if out == "none":
        echo(created)
        return
    say(created)
    if out == "json":
        emit_json(written)
    elif out == "hcl":
        echo_raw(render_hcl(written))
    elif out == "go-template":
        echo_raw(render_template(template, written))
    else:
        _print_variable(written)


def list_out(found: list[dict[str, Any]], out: str, template: str, ns: str) -> None:
    """`var list -out`'s formats (`table` is the caller's own)."""
    from yurt.runtime.cli.api_client import emit_json
    from yurt.runtime.cli.output import echo_raw, render_template

    if out == "json":
        emit_json(found)
    elif out == "go-template":
        echo_raw(render_template(template, found))
    else:
        for line in terse_lines(found, ns):
            echo(line)
