"""Limits on what a job file may be, and the checks that need no parse.

A job file is untrusted input (the HTTP API parses what any client sends), and every stage of
the jobspec is plain Python: recursive (lark's transformer, the position index, the shape
checks) or linear with a large constant (a close-match hint per unknown key). Without limits one
deep or wide document costs a RecursionError or minutes of CPU. The limits are far above any
real job and are checked before the expensive stages.

What lives here: the numeric limits (shared by the readers in `syntax`, the rules in `rules`
and the HTTP API, which bounds a decoded body before it is a job), and the iterative checks of
decoded JSON and of text for lone surrogates. Invariant: nothing here recurses, so it is safe
on any input, however deep.
"""

from __future__ import annotations

from typing import Any, Final

from yurt.runtime.lib.sourcemap import PathKey, Position

#: Largest job text, in characters. lark reads HCL at about 10 µs a character: 1 Mi takes
#: seconds, the largest real jobs are a few KiB.
MAX_JOB_CHARS: Final = 1 << 20
#: Deepest nesting of objects and lists (JSON) a job may have; real jobs stay under ~10.
MAX_DEPTH: Final = 64
#: Deepest lark parse tree an HCL job may have. One HCL nesting level (a block, a list, a
#: parenthesis) is several tree levels, and lark's transformer recurses two frames a level.
MAX_HCL_TREE_DEPTH: Final = 240
#: Values (JSON: objects, lists, scalars) a job may hold; HCL: parse-tree nodes, about ten a
#: value. A large real job holds a few hundred.
MAX_VALUES: Final = 20_000
MAX_HCL_NODES: Final = 10 * MAX_VALUES
#: Problems reported before the checks stop: a user reads the first ones and fixes them.
MAX_PROBLEMS: Final = 100
#: Instances of all a job's groups together: Nomad's `job_max_count` default
#: (`JobDefaultMaxCount`), checked on register and on scale.
MAX_JOB_COUNT: Final = 50_000


def job_count_problem(total: int) -> str | None:
    """Nomad's refusal of a job whose groups' counts add up past `MAX_JOB_COUNT`."""
    if total <= MAX_JOB_COUNT:
        return None
    return f"total count was greater than configured job_max_count: {total} > {MAX_JOB_COUNT}"
#: Task names become file names (`<task>/`, `.<task>.stderr.fifo`, `<task>.stdout.<n>`):
#: leave room for the longest suffix under the usual 255-byte NAME_MAX.
MAX_NAME_BYTES: Final = 200
#: Go's int, the type of every integer field of a Nomad job.
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1


def _lone_surrogate(text: str) -> Position | None:
    """Where `text` holds a lone surrogate (not Unicode text: it cannot be encoded)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        before = text[:e.start]
        return before.count("\n") + 1, e.start - (before.rfind("\n") + 1) + 1
    return None


def json_value_trouble(doc: Any) -> tuple[PathKey, str] | None:
    """The key path of the first value nested deeper than `MAX_DEPTH`, or past the first
    `MAX_VALUES` values, or holding a string that is not Unicode text (a `\\ud800` escape
    decodes to a lone surrogate), and why."""
    stack: list[tuple[Any, PathKey]] = [(doc, ())]
    values = 0
    while stack:
        value, path = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return (), f"the job is too large (more than {MAX_VALUES} values)"
        if len(path) > MAX_DEPTH:
            return path, f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(value, str):
            if _lone_surrogate(value) is not None:
                return path, "not valid Unicode text (a lone surrogate such as \\ud800)"
        elif isinstance(value, dict):
            for k, v in value.items():
                if _lone_surrogate(k) is not None:
                    return path, "a key is not valid Unicode text (a lone surrogate)"
                stack.append((v, (*path, k)))
        elif isinstance(value, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(value))
    return None

