"""Job diffs in Nomad's shape (`JobDiff`, `TaskGroupDiff`, `TaskDiff`, `ObjectDiff`,
`FieldDiff`), for `/v1/job/:id/versions?diffs=true` and `/v1/job/:id/plan`. Pure.

What is compared is the JSON the API speaks (field names are Nomad's). Primitive fields are
`Fields` with string values (`Old`/`New`, as Nomad formats them: `true`, `42`); a map of
primitives (`Meta`, `Env`) is fields named `Meta[key]`; a list of primitives is an object of
the list's name with one field per element added or removed; a nested object is an `Objects`
entry, compared the same way; task groups and tasks are matched by name. Only changes are
listed (Nomad's non-contextual diff); the server's bookkeeping fields are left out.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from yurt.runtime.structs import Job

ADDED: Final = "Added"
DELETED: Final = "Deleted"
EDITED: Final = "Edited"
NONE: Final = "None"

#: Job fields that are the server's bookkeeping, not the spec (Nomad leaves them out too).
_JOB_SKIP: Final = frozenset({"ID", "Status", "StatusDescription", "Version", "SubmitTime",
                              "CreateIndex", "ModifyIndex", "JobModifyIndex", "Stable",
                              "TaskGroups"})
_PRIMITIVE = (str, int, float, bool)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _kind(old: Any, new: Any) -> str:
    if old is None:
        return ADDED
    if new is None:
        return DELETED
    return EDITED


def _field(name: str, old: Any, new: Any) -> dict[str, Any]:
    return {"Type": _kind(old, new), "Name": name, "Old": _text(old), "New": _text(new),
            "Annotations": None}


def _is_primitive_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, _PRIMITIVE) or v is None for v in value.values())


def _compare(old: dict[str, Any], new: dict[str, Any], skip: frozenset[str] = frozenset()
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Fields, Objects) of what differs between two JSON objects."""
    fields: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    for key in sorted(set(old) | set(new)):
        if key in skip:
            continue
        o, n = old.get(key), new.get(key)
        if o == n:
            continue
        if isinstance(o, _PRIMITIVE) or isinstance(n, _PRIMITIVE) or (o is None and n is None):
            fields.append(_field(key, o, n))
        elif (o is None or _is_primitive_map(o)) and (n is None or _is_primitive_map(n)) \
                and (o or n) and key in ("Meta", "Env"):
            om, nm = o or {}, n or {}
            fields += [_field(f"{key}[{k}]", om.get(k), nm.get(k))
                       for k in sorted(set(om) | set(nm)) if om.get(k) != nm.get(k)]
        elif isinstance(o, list | type(None)) and isinstance(n, list | type(None)) and all(
                isinstance(v, _PRIMITIVE) for v in [*(o or []), *(n or [])]):
            before, after = [_text(v) for v in o or []], [_text(v) for v in n or []]
            elements = ([_field(key, None, v) for v in after if v not in before]
                        + [_field(key, v, None) for v in before if v not in after])
            objects.append({"Type": _kind(o, n), "Name": key, "Fields": elements,
                            "Objects": None})
        else:
            objects.append(_object(key, o, n))
    return fields, objects


def _object(name: str, old: Any, new: Any) -> dict[str, Any]:
    def as_dict(value: Any) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        if isinstance(value, list):
            return {f"{name}[{i}]" if not isinstance(v, dict) else str(i): v
                    for i, v in enumerate(value)}
        return {}

    fields, objects = _compare(as_dict(old), as_dict(new))
    return {"Type": _kind(old, new), "Name": name, "Fields": fields or None,
            "Objects": objects or None}


def _by_name(items: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {i.get("Name", ""): i for i in items or []}


def _named_diffs(old: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None,
                 skip: frozenset[str]) -> list[tuple[str, str, list[Any], list[Any],
                                                     dict[str, Any], dict[str, Any]]]:
    olds, news = _by_name(old), _by_name(new)
    out = []
    for name in sorted(set(olds) | set(news)):
        o, n = olds.get(name), news.get(name)
        fields, objects = _compare(o or {}, n or {}, skip)
        kind = NONE if o is not None and n is not None and not (fields or objects) \
            else _kind(o, n)
        out.append((name, kind, fields, objects, o or {}, n or {}))
    return out


def job_diff(old: Job | None, new: Job | None,
             updates: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """Nomad's `JobDiff` from `old` to `new` (either may be None: added, deleted); with
    `updates` (group → Nomad's update counts), each group's `Updates`, as a plan has it."""
    o = msgspec.to_builtins(old) if old is not None else None
    n = msgspec.to_builtins(new) if new is not None else None
    fields, objects = _compare(o or {}, n or {}, _JOB_SKIP)
    groups = []
    for name, kind, g_fields, g_objects, og, ng in _named_diffs(
            (o or {}).get("TaskGroups"), (n or {}).get("TaskGroups"), frozenset({"Tasks"})):
        tasks = [{"Type": t_kind, "Name": t_name, "Fields": t_fields or None,
                  "Objects": t_objects or None, "Annotations": None}
                 for t_name, t_kind, t_fields, t_objects, _, _ in _named_diffs(
                     og.get("Tasks"), ng.get("Tasks"), frozenset())]
        if kind == NONE and any(t["Type"] != NONE for t in tasks):
            kind = EDITED
        groups.append({"Type": kind, "Name": name, "Fields": g_fields or None,
                       "Objects": g_objects or None, "Tasks": tasks or None,
                       "Updates": (updates or {}).get(name)})
    if o is not None and n is not None:
        changed = fields or objects or any(g["Type"] != NONE for g in groups)
        kind = EDITED if changed else NONE
    else:
        kind = _kind(o, n)
    return {"Type": kind, "ID": (n or o or {}).get("ID", ""), "Fields": fields or None,
            "Objects": objects or None, "TaskGroups": groups or None}


#: A task's fields and blocks that change nothing of a running task (scheduler/annotate.go
#: `annotateTask`): a change of only these is an in-place update.
_IN_PLACE_FIELDS: Final = frozenset({"KillTimeout"})
_IN_PLACE_OBJECTS: Final = frozenset({"Service", "Services", "Constraint", "Constraints",
                                      "Affinity", "Affinities", "Spread", "Spreads"})


def annotate_plan(diff: dict[str, Any]) -> dict[str, Any]:
    """A plan's diff with Nomad's annotations (scheduler/annotate.go `Annotate`): a group's
    `Count` change "forces create" or "forces destroy"; each changed task "forces create" or
    "forces destroy" (added or deleted with its group), else "forces create/destroy update" or
    "forces in-place update". Changes `diff` in place and returns it."""
    for group in diff.get("TaskGroups") or []:
        for field in group.get("Fields") or []:
            if field["Name"] == "Count":
                old, new = int(field["Old"] or 0), int(field["New"] or 0)
                if old != new:
                    field["Annotations"] = ["forces create" if old < new else "forces destroy"]
        for task in group.get("Tasks") or []:
            if task["Type"] == NONE:
                continue
            if group["Type"] in (ADDED, DELETED) and task["Type"] in (ADDED, DELETED):
                task["Annotations"] = ["forces create" if task["Type"] == ADDED
                                       else "forces destroy"]
                continue
            destructive = any(f["Name"] not in _IN_PLACE_FIELDS
                              for f in task.get("Fields") or []) or any(
                o["Name"] not in _IN_PLACE_OBJECTS
                and not (o["Name"] == "LogConfig" and not any(
                    f["Name"] == "Disabled" for f in o.get("Fields") or []))
                for o in task.get("Objects") or [])
            task["Annotations"] = ["forces create/destroy update" if destructive
                                   else "forces in-place update"]
    return diff
