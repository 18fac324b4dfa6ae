"""Job files to `Job` structs: Nomad HCL2 and Nomad JSON, with defaults and validation.

Theory of operation. A job file goes through four stages, and each stage reports *every*
problem it finds before the next one runs, so a user fixes a file in one pass:

1. **Parse** the text. HCL goes through python-hcl2 (lark) once; the raw lark tree gives the
   position index (`sourcemap.hcl_positions`) and is then serialised to plain dicts. JSON goes
   through `json.loads`; its positions are indexed only if there is an error to place. A syntax
   error stops here, with lark's or json's line and column.
2. **Normalise** HCL into the shape of Nomad's API JSON: jobspec names become JSON names
   (`kill_timeout` → `KillTimeout`, `restart` → `RestartPolicy`, `group "x"` → an element of
   `TaskGroups` with `Name: "x"`), single blocks are unwrapped, duration strings become
   nanoseconds and `$${` escapes become `${`. Unknown keys are reported by their HCL name.
   `HCL_SCHEMA` is the one table that says which HCL names exist and where they go.
3. **Check the shape** of the JSON-shaped data against the structs' own type annotations
   (`_FieldSpec`, derived from msgspec's field info, so the structs stay the single source
   of truth): unknown fields, wrong types, nulls (dropped: in Nomad's JSON null means "unset").
   Then `msgspec.convert` builds the `Job`; it cannot fail on checked data, but if it does the
   error is still reported as a `JobSpecError`.
4. **Validate** the rules Nomad enforces (restart policy, lifecycle hooks, one leader, unique
   names, known drivers and their configs, resources, log storage against the ephemeral disk),
   then **canonicalise**: fill the job-type-dependent restart policy and merge task restart
   blocks over their group's.

Every problem carries two paths: the *display path* (`job.web.group.api.task.server.restart.mode`,
the jobspec's vocabulary, shown to the user and used to find HCL positions) and the *key path*
(`TaskGroups/0/Tasks/1/RestartPolicy/Mode`, used to find JSON positions). The same job written in
HCL and in JSON therefore yields equal structs and equivalent errors.

A job file is untrusted input (the HTTP API parses what any client sends), so before stage 1
ends the text is bounded: its size, its nesting (JSON depth, HCL parse-tree depth, both checked
iteratively before anything recursive runs), its number of values, and its Unicode (a lone
surrogate cannot be printed or stored). NaN and Infinity, which Python's `json` accepts, are
refused as JSON refuses them. The checks stop after `MAX_PROBLEMS`. Whatever the input, the
only exception out of `parse_job` is a `JobSpecError` with positions.

Not supported (reported as such, never ignored silently): Nomad features that need a scheduler
or network stack yurt does not have (`service`, `network`, `constraint`, `template`, …).

HCL2 variables, locals and functions: between stages 1 and 2, `resolve` (resolve.py) reads the
`variable` and `locals` blocks, takes values from `VarInputs` (NOMAD_VAR_*, var files, -var)
and renders the job block (evaluate.py, evaluate_tree.py, functions.py, variables.py).

Layout: one module per stage, in the order a job goes through them. `limits` (what a job file
may be, checks that need no parse), `syntax` (stage 1), `fields` (the vocabulary and the
problem bookkeeping every later stage shares), `hcl` (stage 2), `shape` (stage 3), `rules`
(stage 4 and `canonicalize`; `reschedule` holds the reschedule block's part of both), and
`parse` (the entry points that run them). The modules are the package's insides: other code
imports the names below from `yurt.runtime.jobspec`.
"""

from yurt.runtime.jobspec.fields import HCL_SCHEMA, UNSUPPORTED, HclField, Kind
from yurt.runtime.jobspec.limits import (
    INT_MAX,
    INT_MIN,
    MAX_DEPTH,
    MAX_HCL_NODES,
    MAX_HCL_TREE_DEPTH,
    MAX_JOB_CHARS,
    MAX_JOB_COUNT,
    MAX_NAME_BYTES,
    MAX_PROBLEMS,
    MAX_VALUES,
    json_value_trouble,
)
from yurt.runtime.jobspec.parse import Format, detect_format, encode_job, load_job, parse_job
from yurt.runtime.jobspec.rules import MIN_RESTART_INTERVAL, canonicalize, merge_restart
from yurt.runtime.jobspec.variables import VarInputs

__all__ = [
    "HCL_SCHEMA",
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH",
    "MAX_HCL_NODES",
    "MAX_HCL_TREE_DEPTH",
    "MAX_JOB_CHARS",
    "MAX_JOB_COUNT",
    "MAX_NAME_BYTES",
    "MAX_PROBLEMS",
    "MAX_VALUES",
    "MIN_RESTART_INTERVAL",
    "UNSUPPORTED",
    "Format",
    "HclField",
    "Kind",
    "VarInputs",
    "canonicalize",
    "detect_format",
    "encode_job",
    "json_value_trouble",
    "load_job",
    "merge_restart",
    "parse_job",
]
