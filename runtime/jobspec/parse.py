"""The entry points: `parse_job` runs the four stages in order, `load_job` reads a file first.

What lives here: format detection, the pipeline that turns the collected problems into one
`JobSpecError` with positions, and `encode_job` (the inverse, as Nomad API JSON).

Invariants: the text is bounded (size, Unicode) before stage 1 reads it; whatever the input,
the only exception out of `parse_job` is a `JobSpecError`; a job is canonicalised only when no
stage found a problem.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from yurt.runtime.errors import JobSpecError, SpecProblem
from yurt.runtime.jobspec.fields import _At, _Problems, _TooManyProblems
from yurt.runtime.jobspec.hcl import _HclNormaliser
from yurt.runtime.jobspec.heredoc import restore_heredoc_newlines
from yurt.runtime.jobspec.limits import MAX_JOB_CHARS, MAX_PROBLEMS, _lone_surrogate
from yurt.runtime.jobspec.resolve import resolve
from yurt.runtime.jobspec.rules import _check_job, canonicalize
from yurt.runtime.jobspec.shape import _check_shape
from yurt.runtime.jobspec.syntax import _load_hcl, _load_json
from yurt.runtime.jobspec.variables import VarInputs
from yurt.runtime.lib.sourcemap import PathKey, Position, hcl_positions, json_positions, locate
from yurt.runtime.structs import Job

Format = Literal["hcl", "json"]

#: What an empty job file is told (HCL and JSON alike).
EMPTY_FILE: Final = ('the file is empty; a job file holds one job "<id>" { group "<name>" '
                     '{ task "<name>" { … } } } block, or Nomad API JSON {"Job": {…}}')


def detect_format(filename: str, text: str) -> Format:
    """`.json` files, and text that starts with `{`, are JSON; everything else is HCL."""
    if filename.endswith(".json") or text.lstrip().startswith("{"):
        return "json"
    return "hcl"


def parse_job(text: str, *, filename: str = "<job>", format: Format | None = None,
              variables: VarInputs | None = None) -> Job:
    """Parse, validate and canonicalise a job.

    Args:
        text: the job file's contents, Nomad HCL2 or Nomad JSON (`{"Job": {…}}`).
        filename: used in error messages.
        format: "hcl" or "json"; guessed by `detect_format` when omitted.
        variables: values for the file's `variable` blocks (environment, var files, -var);
            none but the defaults when omitted. JSON jobs have no variables.

    Returns:
        The canonical `Job`: defaults filled, restart policies merged.

    Raises:
        JobSpecError: listing every problem found, each with line, column and field path.
    """
    try:
        return _parse_job(text, filename, format or detect_format(filename, text),
                          variables or VarInputs())
    except RecursionError:
        # The depth limits keep every stage far from the recursion limit; should one still be
        # reached, it is the input's fault and is reported as such, never as a traceback.
        raise JobSpecError(filename, [SpecProblem(0, 0, "syntax", "the job is nested too "
                                                  "deeply to be read")]) from None


def _parse_job(text: str, filename: str, fmt: Format, variables: VarInputs) -> Job:
    if len(text) > MAX_JOB_CHARS:
        raise JobSpecError(filename, [SpecProblem(0, 0, "file", f"the job is larger than "
                                                  f"{MAX_JOB_CHARS >> 20} MiB")])
    if not text.strip():  # one clear error, not the three a missing job would raise below
        raise JobSpecError(filename, [SpecProblem(0, 0, "file", EMPTY_FILE)])
    surrogate = _lone_surrogate(text)
    if surrogate is not None:
        raise JobSpecError(filename, [SpecProblem(*surrogate, "syntax", "not valid Unicode "
                                                  "text (a lone surrogate)")])
    problems = _Problems([])
    positions: Callable[[], dict[PathKey, Position]]
    key_prefix: PathKey = ()
    job: Job | None = None
    try:
        if fmt == "hcl":
            raw, tree = _load_hcl(text, filename)
            restore_heredoc_newlines(raw, tree)
            hcl_index = hcl_positions(tree)
            raw, _values = resolve(raw, hcl_index, filename, variables)
            hcl_keyed: dict[PathKey, Position] = {}
            positions = lambda: hcl_keyed  # noqa: E731 - same signature as the lazy JSON index
            data, root = _HclNormaliser(hcl_index, problems, hcl_keyed).job(raw)
            if not data:  # no job block (only comments, say): that one problem says it all
                raise _TooManyProblems
        else:
            doc = _load_json(text, filename)
            if isinstance(doc, dict) and set(doc) == {"Job"}:
                doc, key_prefix = doc["Job"], ("Job",)
            elif not (isinstance(doc, dict) and ("ID" in doc or "TaskGroups" in doc)):
                raise JobSpecError(filename, [SpecProblem(1, 1, "job", 'expected Nomad API JSON, '
                                                          '{"Job": {"ID": …, "TaskGroups": […]}}')])
            data = doc
            job_id = doc.get("ID") if isinstance(doc, dict) else None
            # The job's name in paths (`job.web.group.g`), or plain `job` while it has none.
            root = _At(("job", job_id) if isinstance(job_id, str) and job_id else ("job",), ())
            positions = lambda: json_positions(text)  # noqa: E731

        checked = _inherit_job_blocks(_check_shape(Job, data, root, problems))
        try:
            # Values that failed their check were left out, so this succeeds and the rules
            # below still run: one pass reports shape and rule problems together.
            job = msgspec.convert(checked, Job)
        except msgspec.ValidationError as e:  # pragma: no cover - _check_shape should catch it
            problems.add(root, str(e))
        if job is not None:
            _check_job(job, _At(("job", job.id) if job.id else ("job",), ()), problems)
    except _TooManyProblems:
        pass

    if problems.items:
        index = positions()
        out = []
        for at, message in problems.items:
            line, column = locate(index, (*key_prefix, *at.k))
            out.append(SpecProblem(line, column, ".".join(str(p) for p in at.d), message))
        if len(problems.items) >= MAX_PROBLEMS:
            out.append(SpecProblem(0, 0, "job", f"stopped after {MAX_PROBLEMS} problems"))
        raise JobSpecError(filename, out)
    if job is None:  # pragma: no cover - a failed convert always adds a problem
        raise JobSpecError(filename, [SpecProblem(0, 0, "job", "the job could not be read")])
    return canonicalize(job)


def _inherit_job_blocks(job: dict[str, Any]) -> dict[str, Any]:
    """A job-level `migrate` block is every group's default, field by field (a field the group's
    own block sets wins), as Nomad's API canonicalization merges it; the job keeps none."""
    migrate = job.pop("Migrate", None)
    if isinstance(migrate, dict):
        for group in job.get("TaskGroups", []):
            if isinstance(group, dict):
                group["Migrate"] = {**migrate, **group.get("Migrate", {})}
    return job


def load_job(path: str | Path, variables: VarInputs | None = None) -> Job:
    """Read and parse a job file; unreadable files are a `JobSpecError` too. File functions
    (`file`, `templatefile`) read relative to the job file's directory."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise JobSpecError(name, [SpecProblem(0, 0, "file", f"cannot read: {reason}")]) from None
    if variables is not None and variables.base_dir is None:
        variables = dataclasses.replace(variables, base_dir=str(Path(path).parent))
    return parse_job(text, filename=name, variables=variables)


def encode_job(job: Job) -> bytes:
    """The job as Nomad API JSON, `{"Job": {…}}`, as `nomad job run -output` prints it."""
    return msgspec.json.format(msgspec.json.encode({"Job": job}), indent=2)
