"""A job diff (the API's `Diff` of `job history -p` and of a plan) as `+`/`-`/`+/-` lines, one
per changed field, object, group and task. Pure: the API's JSON in, lines out.
"""

from __future__ import annotations

from typing import Any

_MARK = {"Added": "+", "Deleted": "-", "Edited": "+/-", "None": ""}


def _field_lines(fields: list[dict[str, Any]] | None, indent: str) -> list[str]:
    lines = []
    for field in fields or []:
        kind, name = field["Type"], field["Name"]
        if kind == "Added":
            lines.append(f'{indent}+ {name}: "{field["New"]}"')
        elif kind == "Deleted":
            lines.append(f'{indent}- {name}: "{field["Old"]}"')
        elif kind == "Edited":
            lines.append(f'{indent}+/- {name}: "{field["Old"]}" => "{field["New"]}"')
    return lines


def _object_lines(objects: list[dict[str, Any]] | None, indent: str) -> list[str]:
    """Changed blocks (`Config {`, `Resources {` …) with their changed fields, nested."""
    lines = []
    for obj in objects or []:
        if obj["Type"] == "None":
            continue
        lines.append(f'{indent}{_MARK[obj["Type"]]} {obj["Name"]} {{')
        lines += _field_lines(obj.get("Fields"), indent + "  ")
        lines += _object_lines(obj.get("Objects"), indent + "  ")
        lines.append(f"{indent}  }}")
    return lines


def diff_lines(diff: dict[str, Any], updates: dict[str, str] | None = None) -> list[str]:
    """A JobDiff as Nomad's `job plan` and `job history -p` print it: the job, each group
    (with what the plan does to it, when given) and task, and every changed field and block,
    marked + (added), - (deleted) or +/- (edited)."""
    mark = _MARK[diff.get("Type", "None")]
    lines = [f'{mark + " " if mark else ""}Job: "{diff.get("ID", "")}"']
    lines += _field_lines(diff.get("Fields"), "")
    lines += _object_lines(diff.get("Objects"), "")
    for group in diff.get("TaskGroups") or []:
        counts = (updates or {}).get(group["Name"], "")
        if group["Type"] == "None" and not counts:
            continue
        gmark = _MARK[group["Type"]]
        lines.append(f'{gmark + " " if gmark else ""}Task Group: "{group["Name"]}"'
                     + (f" ({counts})" if counts else ""))
        lines += _field_lines(group.get("Fields"), "  ")
        lines += _object_lines(group.get("Objects"), "  ")
        for task in group.get("Tasks") or []:
            if task["Type"] == "None":
                continue
            lines.append(f'  {_MARK[task["Type"]]} Task: "{task["Name"]}"')
            lines += _field_lines(task.get("Fields"), "    ")
            lines += _object_lines(task.get("Objects"), "    ")
    return lines
