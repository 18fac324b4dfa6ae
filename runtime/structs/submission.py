"""A job's submission: the source it was registered from, as Nomad records it (1.6+).

`JobSubmission` is nomad/structs/structs.go `JobSubmission`: the job file as given (`Source`),
its `Format` ("hcl2" or "json"), the CLI's `-var` values (`VariableFlags`) and the var files'
contents (`Variables`); the server sets `Namespace`, `JobID`, `Version` and `JobModifyIndex`
to the job version the register stored (nomad/state/state_store.go `updateJobSubmission`).

Invariants: a submission is kept only beside a job version the history keeps, and one whose
source, variables and flags together exceed `JOB_MAX_SOURCE_SIZE` bytes is never stored
(nomad/job_endpoint_hooks.go `submissionController`: the job registers, with a warning).
"""

from __future__ import annotations

import math
from typing import Any, Final

from msgspec import field

from yurt.runtime.structs.base import Base

#: Nomad's default `job_max_source_size` ("1M", read by humanize.ParseBytes: SI bytes).
JOB_MAX_SOURCE_SIZE: Final = 1_000_000


class JobSubmission(Base):
    source: str = ""
    format: str = ""
    variable_flags: dict[str, str] | None = None
    variables: str = ""
    namespace: str = ""
    job_id: str = field(default="", name="JobID")
    version: int = 0
    job_modify_index: int = 0


def submission_size(sub: JobSubmission) -> int:
    """What Nomad counts against the limit: source, variables, and every flag's name and value
    (nomad/job_endpoint_hooks.go `submissionController`, in bytes)."""
    return (len(sub.source.encode()) + len(sub.variables.encode())
            + sum(len(k.encode()) + len(v.encode())
                  for k, v in (sub.variable_flags or {}).items()))


def si_bytes(n: int) -> str:
    """`n` bytes as go-humanize's `Bytes` words it ("512 B", "1.5 MB", "15 MB")."""
    if n < 10:
        return f"{n} B"
    sizes = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
    e = min(math.floor(math.log(n) / math.log(1000)), len(sizes) - 1)
    val = math.floor(n / 1000 ** e * 10 + 0.5) / 10
    return f"{val:.0f} {sizes[e]}" if val >= 10 else f"{val:.1f} {sizes[e]}"


def oversize_warning(sub: JobSubmission, limit: int = JOB_MAX_SOURCE_SIZE) -> str | None:
    """Nomad's warning when the submission is over `limit` (and so dropped), else None."""
    size = submission_size(sub)
    if size <= limit:
        return None
    return (f"job source size of {si_bytes(size)} exceeds maximum of {si_bytes(limit)} "
            "and will be discarded")


def submission_from_body(raw: Any) -> JobSubmission | None:
    """The body's `Submission` (api/jobs.go `JobSubmission`: Source, Format, VariableFlags,
    Variables; what the server manages is ignored), None when absent; ValueError naming the
    field when it has the wrong shape."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("Submission: expected an object")
    source, fmt = raw.get("Source") or "", raw.get("Format") or ""
    variables, flags = raw.get("Variables") or "", raw.get("VariableFlags") or {}
    for name, value in (("Source", source), ("Format", fmt), ("Variables", variables)):
        if not isinstance(value, str):
            raise ValueError(f"Submission.{name}: expected a string")
    if not isinstance(flags, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in flags.items()):
        raise ValueError("Submission.VariableFlags: expected an object of strings")
    return JobSubmission(source=source, format=fmt, variables=variables,
                         variable_flags=dict(flags) or None)
