"""A plan's job diff as Nomad's `job plan` prints it (command/job_plan.go `formatJobDiff` and
the functions it calls), without colour.

For a new job that is three lines (`+ Job: "example"`, `+ Task Group: "cache" (1 create)`,
`  + Task: "redis" (forces create)`): an added or deleted job, group or task shows its
fields only with `verbose`; an edited one always shows what changed. Fields and blocks are
aligned as Nomad aligns them (markers padded to the longest, values to the longest name).

Pure: a diff dict in (the API's `JobDiff` JSON), text out.
"""

from __future__ import annotations

from typing import Any

_MARKERS = {"Added": "+ ", "Deleted": "- ", "Edited": "+/- "}


def _marker(kind: str) -> str:
    return _MARKERS.get(kind, "")


def _longest(fields: list[dict[str, Any]], objects: list[dict[str, Any]]) -> tuple[int, int]:
    """Nomad's `getLongestPrefixes`: the longest field name and the longest marker."""
    name = max((len(f["Name"]) for f in fields), default=0)
    mark = max((len(_marker(d["Type"])) for d in [*fields, *objects]), default=0)
    return name, mark


def _field(f: dict[str, Any], start: int, key_pad: int, value_pad: int) -> str:
    kind = f["Type"]
    value = {"Added": _q(f.get("New")), "Deleted": _q(f.get("Old")),
             "Edited": f'{_q(f.get("Old"))} => {_q(f.get("New"))}'}.get(kind, _q(f.get("New")))
    out = f'{" " * start}{_marker(kind)}{" " * key_pad}{f["Name"]}: {" " * value_pad}{value}'
    if f.get("Annotations"):
        out += f' ({", ".join(f["Annotations"])})'
    return out


def _q(value: Any) -> str:
    """Go's `%q` of a string (enough of it: quotes and backslashes escaped)."""
    text = "" if value is None else str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _object(o: dict[str, Any], start: int, key_pad: int) -> str:
    """Nomad's `formatObjectDiff`."""
    mark = _marker(o["Type"])
    fields, objects = o.get("Fields") or [], o.get("Objects") or []
    name_len, mark_len = _longest(fields, objects)
    body = _aligned(fields, objects, start + key_pad + 2, name_len, mark_len)
    head = f'{" " * start}{mark}{" " * key_pad}{o["Name"]} {{\n'
    return f'{head}{body}\n{" " * (start + len(mark) + key_pad)}}}'


def _aligned(fields: list[dict[str, Any]], objects: list[dict[str, Any]], start: int,
             name_len: int, mark_len: int) -> str:
    """Nomad's `alignedFieldAndObjects`."""
    parts = [_field(f, start, mark_len - len(_marker(f["Type"])), name_len - len(f["Name"]))
             for f in fields]
    parts += [_object(o, start, mark_len - len(_marker(o["Type"]))) for o in objects]
    return "\n".join(parts)


def _task(task: dict[str, Any], start: int, pad: int, verbose: bool) -> str:
    """Nomad's `formatTaskDiff`."""
    out = f'{" " * start}{_marker(task["Type"])}{" " * pad}Task: "{task["Name"]}"'
    if task.get("Annotations"):
        out += f' ({", ".join(task["Annotations"])})'
    if task["Type"] == "None" or (task["Type"] in ("Added", "Deleted") and not verbose):
        return out
    fields, objects = task.get("Fields") or [], task.get("Objects") or []
    name_len, mark_len = _longest(fields, objects)
    return out + "\n" + _aligned(fields, objects, start + 2, name_len, mark_len)


def _group(group: dict[str, Any], pad: int, verbose: bool) -> str:
    """Nomad's `formatTaskGroupDiff`."""
    out = f'{_marker(group["Type"])}{" " * pad}Task Group: "{group["Name"]}"'
    updates = group.get("Updates") or {}
    out += f' ({", ".join(f"{updates[k]} {k}" for k in sorted(updates))})\n' if updates \
        else "\n"
    fields, objects = group.get("Fields") or [], group.get("Objects") or []
    tasks = group.get("Tasks") or []
    name_len, mark_len = _longest(fields, objects)
    mark_len = max([mark_len, *(len(_marker(t["Type"])) for t in tasks)])
    if group["Type"] == "Edited" or verbose:
        body = _aligned(fields, objects, 2, name_len, mark_len)
        if body:
            out += body + "\n"
    for task in tasks:
        out += _task(task, 2, mark_len - len(_marker(task["Type"])), verbose) + "\n"
    return out


def format_job_diff(diff: dict[str, Any], verbose: bool = False) -> str:
    """Nomad's `formatJobDiff`, trimmed as `job plan` prints it."""
    out = f'{_marker(diff.get("Type", "None"))}Job: "{diff.get("ID", "")}"\n'
    fields, objects = diff.get("Fields") or [], diff.get("Objects") or []
    groups = diff.get("TaskGroups") or []
    name_len, mark_len = _longest(fields, objects)
    mark_len = max([mark_len, *(len(_marker(g["Type"])) for g in groups)])
    if diff.get("Type") == "Edited" or verbose:
        body = _aligned(fields, objects, 0, name_len, mark_len)
        if body:
            out += body + "\n"
    for group in groups:
        out += _group(group, mark_len - len(_marker(group["Type"])), verbose) + "\n"
    return out.strip()
