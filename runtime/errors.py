"""yurt's exception hierarchy, split by who is to blame.

- `JobSpecError`: the user's input (a job file) is wrong. It carries every problem found, each
  with file, line, column and field path, so one run reports them all.
- `StateError` and subclasses: the state directory cannot be used as it is (locked by another
  agent, written by an unknown schema version, unreadable). The operator must act.
- `DriverError`: a task could not be started or controlled; `recoverable` says whether a
  restart may help, as Nomad's drivers mark it.
Anything else escaping is a bug in yurt. OS errors are translated where they happen, at the one
boundary that knows what they mean for the user.

The CLI's exit codes live here too, so every command means the same thing by each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1  # the job or the request failed
EXIT_UNREACHABLE: Final = EXIT_FAILED  # no agent answers at $YURT_ADDR: the request failed
EXIT_USAGE: Final = 2  # bad input: arguments, job file, state directory
EXIT_INTERRUPTED: Final = 130  # Ctrl-C, as a shell reports it

#: The one exit-status table every verb follows; README.md's "Exit status" table is checked
#: against it word for word (tests/test_cli_readme.py). Verbs with their own contract say so
#: in the command table: `job plan` (Nomad's 0/1/255) and `alloc exec` (the command's code).
EXIT_CODES: Final = {
    EXIT_OK: "success",
    EXIT_FAILED: "the request or the job failed, or no agent answers at `$YURT_ADDR`",
    EXIT_USAGE: "bad input: a usage error, a bad flag value, an invalid job file, an "
                "ambiguous ID prefix",
    EXIT_INTERRUPTED: "interrupted by SIGINT (Ctrl-C), streaming verbs (`-f`, `events`, "
                      "`run`) included",
}


class YurtError(Exception):
    """Base of every error yurt raises on purpose."""


class Unavailable(YurtError):
    """Something the answer needs cannot be reached now (a cluster's etcd): the API answers
    503, and the same request can work once it is back."""


@dataclass(frozen=True, order=True)
class SpecProblem:
    """One thing wrong with a job file. `line`/`column` are 1-based; 0 when unknown."""

    line: int
    column: int
    field: str
    message: str

    def render(self, file: str) -> str:
        where = file
        if self.line:
            where += f":{self.line}"
            if self.column:
                where += f":{self.column}"
        return f"{where}: {self.field or 'job'}: {self.message}"


class JobSpecError(YurtError):
    """A job file that cannot be run, with every problem found in it."""

    def __init__(self, file: str, problems: list[SpecProblem]) -> None:
        self.file = file
        self.problems = sorted(problems)
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(p.render(self.file) for p in self.problems)


class StateError(YurtError):
    """The state database cannot be used as it is."""


class StateLockedError(StateError):
    """Another agent holds the data directory."""


class StateVersionError(StateError):
    """The state database has a schema version this yurt does not know."""


class StateWriteError(StateError):
    """A write to the state database failed; the write may not be durable."""


class DriverError(YurtError):
    """A driver could not start or control a task."""

    def __init__(self, message: str, *, recoverable: bool = False) -> None:
        super().__init__(message)
        self.recoverable = recoverable


class TaskNotFoundError(DriverError):
    """The driver has no task with that ID (already gone): stopping it counts as success."""


class PluginShutdownError(DriverError):
    """The driver plugin went away while waiting on a task; re-dispense and recover."""

    def __init__(self, message: str = "plugin is shut down") -> None:
        super().__init__(message, recoverable=True)


class TaskNotRunningError(YurtError):
    """A restart or signal for a task that is not running (Nomad's `ErrTaskNotRunning`)."""

    def __init__(self, message: str = "Task not running") -> None:
        super().__init__(message)


class HookError(YurtError):
    """A runner hook failed; `recoverable` says whether a restart may help."""

    def __init__(self, message: str, *, recoverable: bool = False) -> None:
        super().__init__(message)
        self.recoverable = recoverable
