"""Stage 4 rules for placement blocks: `constraint`, `affinity` and `spread` at job, group and
task level, with the messages of Nomad's Constraint.Validate, Affinity.Validate and
Spread.Validate (nomad/structs/structs.go), each problem on the block it is about; a system
job may have no affinity or spread at all (Job, TaskGroup and Task `Validate`).

Invariants: reads a well-typed `Job` and never changes it; every problem goes through
`_Problems`. Nomad prefixes each message with "Constraint <n> validation failed: "; here the
path (`job.web.constraint.0`) says which block, and the message is Nomad's own text.
A `regexp` pattern is compiled as the scheduler compiles it (lib/goregexp.py: Go's RE2),
so registration refuses what would never compile, with Go's message. A match yurt's scheduler
will not run (too costly, runtime/lib/goregexp.py `regexp_refusal`) is not refused here, even
with a literal attribute: Nomad registers such a job, and yurt's placement reports the node
filtered with the reason (runtime/server/scheduler/feasible.py `_filter_text`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.lib.goregexp import GoRegexpError, compile_regexp
from yurt.runtime.lib.goversion import VersionError, semver_constraint, version_constraint
from yurt.runtime.structs import Job, Task, TaskGroup
from yurt.runtime.structs.constraint import (
    COMPARISON_OPERATORS,
    CONSTRAINT_DISTINCT_HOSTS,
    CONSTRAINT_DISTINCT_PROPERTY,
    CONSTRAINT_IS_NOT_SET,
    CONSTRAINT_IS_SET,
    CONSTRAINT_REGEX,
    CONSTRAINT_SEMVER,
    CONSTRAINT_SET_CONTAINS,
    CONSTRAINT_SET_CONTAINS_ALL,
    CONSTRAINT_SET_CONTAINS_ANY,
    CONSTRAINT_VERSION,
    Affinity,
    Constraint,
    Spread,
)

_SET_OPERATORS: Final = (CONSTRAINT_SET_CONTAINS, CONSTRAINT_SET_CONTAINS_ALL,
                         CONSTRAINT_SET_CONTAINS_ANY)
#: nomad/structs/constraint.go: the targets resolveTarget can read.
_EXACT_TARGETS: Final = ("${node.unique.id}", "${node.datacenter}", "${node.unique.name}",
                         "${node.class}", "${node.pool}")
_PREFIX_TARGETS: Final = ("${attr.", "${device.", "${meta.")


def _attribute_problem(target: str) -> str | None:
    """Nomad's validateConstraintAttribute."""
    if not target.startswith("$"):
        return None
    if not target.startswith("${"):
        return f'attribute "{target}" is missing an opening brace'
    if not target.endswith("}"):
        return f'attribute "{target}" is missing a closing brace'
    if target in _EXACT_TARGETS or target.startswith(_PREFIX_TARGETS):
        return None
    return f'unsupported attribute "{target}"'


def _regexp_problem(pattern: str) -> str | None:
    """Why `pattern` fails validation: it does not compile (Nomad's Constraint.Validate)."""
    try:
        compile_regexp(pattern)
    except GoRegexpError as e:
        return f"Regular expression failed to compile: {e}"
    return None


def _version_problem(kind: str, what: str, value: str) -> str | None:
    parse = semver_constraint if kind == CONSTRAINT_SEMVER else version_constraint
    try:
        parse(value)
    except VersionError as e:
        return f"{what} is invalid: {e}"
    return None


def constraint_problems(c: Constraint) -> list[str]:
    """Nomad's Constraint.Validate, one message per problem."""
    out: list[str] = []
    if not c.operator:
        out.append("Missing constraint operand")
    require_attribute = True
    op, value = c.operator, c.value
    if op == CONSTRAINT_DISTINCT_HOSTS:
        require_attribute = False
    elif op in _SET_OPERATORS:
        if not value:
            out.append("Set contains constraint requires an RTarget")
    elif op == CONSTRAINT_REGEX:
        out += filter(None, [_regexp_problem(value)])
    elif op == CONSTRAINT_VERSION:
        out += filter(None, [_version_problem(op, "Version constraint", value)])
    elif op == CONSTRAINT_SEMVER:
        out += filter(None, [_version_problem(op, "Semver constraint", value)])
    elif op == CONSTRAINT_DISTINCT_PROPERTY:
        if value:
            digits = re.fullmatch(r"[0-9]+", value) is not None
            if not digits or int(value) >= 1 << 64:
                why = "value out of range" if digits else "invalid syntax"
                out.append(f'Failed to convert RTarget "{value}" to uint64: strconv.ParseUint: '
                           f'parsing "{value}": {why}')
            elif int(value) < 1:
                out.append("Distinct Property must have an allowed count of 1 or greater: "
                           f"{int(value)} < 1")
    elif op in (CONSTRAINT_IS_SET, CONSTRAINT_IS_NOT_SET):
        if value:
            out.append(f'Operator "{op}" does not support an RTarget')
    elif op in COMPARISON_OPERATORS:
        if not value:
            out.append(f'Operator "{op}" requires an RTarget')
    else:
        out.append(f'Unknown constraint type "{op}"')
    if require_attribute:
        if not c.attribute:
            out.append("no attribute provided but is required by operator")
        elif problem := _attribute_problem(c.attribute):
            out.append(problem)
    return out


def affinity_problems(a: Affinity) -> list[str]:
    """Nomad's Affinity.Validate, one message per problem."""
    out: list[str] = []
    op, value = a.operator, a.value
    if not op:
        out.append("Missing affinity operand")
    if op in _SET_OPERATORS:
        if not value:
            out.append("Set contains operators require an RTarget")
    elif op == CONSTRAINT_REGEX:
        out += filter(None, [_regexp_problem(value)])
    elif op == CONSTRAINT_VERSION:
        out += filter(None, [_version_problem(op, "Version affinity", value)])
    elif op == CONSTRAINT_SEMVER:
        out += filter(None, [_version_problem(op, "Semver affinity", value)])
    elif op in COMPARISON_OPERATORS:
        if not value:
            out.append(f'Operator "{op}" requires an RTarget')
    else:
        out.append(f'Unknown affinity operator "{op}"')
    if not a.attribute:
        out.append("No LTarget provided but is required")
    if a.weight == 0:
        out.append("Affinity weight cannot be zero")
    if not -100 <= a.weight <= 100:
        out.append("Affinity weight must be within the range [-100,100]")
    return out


def spread_problems(s: Spread) -> list[str]:
    """Nomad's Spread.Validate, one message per problem."""
    out: list[str] = []
    if not s.attribute:
        out.append("Missing spread attribute")
    if not 0 < s.weight <= 100:
        out.append("Spread block must have a positive weight from 0 to 100")
    seen: set[str] = set()
    total = 0
    for target in s.target:
        if target.value in seen:
            out.append(f'Spread target value "{target.value}" already defined')
        seen.add(target.value)
        if not 0 <= target.percent <= 100:
            out.append(f'Spread target percentage for value "{target.value}" must be between '
                       "0 and 100")
        total += target.percent
    if total > 100:
        out.append(f"Sum of spread target percentages must not be greater than 100%; "
                   f"got {total}%")
    return out


def _check_blocks(owner: type[Job] | type[TaskGroup] | type[Task], at: _At, job_type: str,
                  constraints: Sequence[Constraint], affinities: Sequence[Affinity],
                  problems: _Problems) -> None:
    for i, c in enumerate(constraints):
        c_at = at.item(owner, "constraints", i, str(i))
        for message in constraint_problems(c):
            problems.add(c_at, message)
        if owner is Task and c.operator in (CONSTRAINT_DISTINCT_HOSTS,
                                            CONSTRAINT_DISTINCT_PROPERTY):
            problems.add(c_at.field(Constraint, "operator"),
                         f"Constraint {i + 1} has disallowed Operand at task level: "
                         f"{c.operator}")
    if job_type == "system" and affinities:
        # Job.Validate, TaskGroup.Validate and Task.Validate: not validated, refused.
        problems.add(at.item(owner, "affinities", 0, "0"),
                     "System jobs may not have an affinity block")
        return
    for i, a in enumerate(affinities):
        a_at = at.item(owner, "affinities", i, str(i))
        for message in affinity_problems(a):
            problems.add(a_at, message)


def _check_spreads(owner: type[Job] | type[TaskGroup], at: _At, job_type: str,
                   spreads: Sequence[Spread], problems: _Problems) -> None:
    if job_type == "system" and spreads:
        problems.add(at.item(owner, "spreads", 0, "0"), "System jobs may not have a spread block")
        return
    for i, s in enumerate(spreads):
        s_at = at.item(owner, "spreads", i, str(i))
        for message in spread_problems(s):
            problems.add(s_at, message)


def check_job_placement(job: Job, root: _At, group_at: Callable[[int], _At],
                        problems: _Problems) -> None:
    """Validate every constraint, affinity and spread of `job`, its groups and tasks."""
    _check_blocks(Job, root, job.type, job.constraints, job.affinities, problems)
    _check_spreads(Job, root, job.type, job.spreads, problems)
    for gi, group in enumerate(job.task_groups):
        g_at = group_at(gi)
        _check_blocks(TaskGroup, g_at, job.type, group.constraints, group.affinities, problems)
        _check_spreads(TaskGroup, g_at, job.type, group.spreads, problems)
        for ti, task in enumerate(group.tasks):
            t_at = g_at.item(TaskGroup, "tasks", ti, task.name or str(ti))
            _check_blocks(Task, t_at, job.type, task.constraints, task.affinities, problems)
