"""A job file as the commands read it: `yurt job run|plan|parse` and `yurt run`.

One rule for every command that takes a job file: its problems end the command with exit 2
(`EXIT_USAGE`), printed as `JobSpecError.render()` words them (`file:line:col: field:
message`, runtime/errors.py), before anything is sent or started.

Variables, as Nomad's `JobGetter` (command/helpers.go) passes them to jobspec2: the
`-var KEY=VALUE` and `-var-file FILE` options (repeatable; `var_options` adds them to a
command) and NOMAD_VAR_* from the environment; an undeclared -var or var-file variable is an
error (Nomad's `-hcl2-strict`, on by default), and file functions read beside the job file.

`yurt job run` also sends the job's submission (`load_job_with_submission`), as Nomad's
`JobGetter.Get` (command/helpers.go) and jobspec2 `submissionFromJob` build it: the file as read,
its format ("json" when it starts with `{`, else "hcl2"), the NOMAD_VAR_* and `-var` values as
`VariableFlags` (-var wins), and the var files' contents, each followed by a newline, as
`Variables`.

A path of `-` reads the job from stdin (Nomad's `JobGetter.Get`), its file functions relative
to the working directory; `read_options(as_json=..., strict=...)` sets Nomad's `-json` (the
input is JSON, whatever it looks like) and `-hcl2-strict` for the command in hand.

A leaf of the CLI: it imports the jobspec (and with it python-hcl2 and lark) only when a file
is read, so the command tree stays light (tests/test_import_weight.py).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from yurt.runtime.cli.output import echo
from yurt.runtime.errors import EXIT_USAGE

if TYPE_CHECKING:
    from yurt.runtime.jobspec import VarInputs
    from yurt.runtime.structs import Job

#: The variables the running command was given (set by `var_options`).
_GIVEN: dict[str, tuple[str, ...]] = {"vars": (), "var_files": ()}
#: Nomad's `-json` and `-hcl2-strict` for the running command (set by `read_options`).
_READ: dict[str, bool] = {"json": False, "strict": True}
#: How a job read from stdin is named in messages.
STDIN_NAME = "<stdin>"


def given_variables() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The `-var` and `-var-file` values the running command was given."""
    return _GIVEN["vars"], _GIVEN["var_files"]


def read_options(*, as_json: bool = False, strict: bool = True) -> None:
    """Nomad's `-json` (parse the input as JSON) and `-hcl2-strict` for this command."""
    _READ["json"], _READ["strict"] = as_json, strict


def var_options(f: Callable[..., None]) -> Callable[..., None]:
    """`-var KEY=VALUE` and `-var-file FILE` (both repeatable), as Nomad's job commands."""

    @functools.wraps(f)
    def wrapper(*args: Any, hcl_vars: tuple[str, ...] = (), hcl_var_files: tuple[str, ...] = (),
                **kwargs: Any) -> None:
        _GIVEN["vars"], _GIVEN["var_files"] = tuple(hcl_vars), tuple(hcl_var_files)
        f(*args, **kwargs)

    wrapper = click.option("-var", "--var", "hcl_vars", multiple=True, metavar="KEY=VALUE",
                           help="A value for a variable of the job file (repeatable).")(wrapper)
    return click.option("-var-file", "--var-file", "hcl_var_files", multiple=True,
                        metavar="FILE", help="HCL or JSON file of variable values "
                        "(repeatable).")(wrapper)


def variable_inputs() -> VarInputs:
    """The values the command was given, plus NOMAD_VAR_* (precedence env < files < -var)."""
    from yurt.runtime.errors import JobSpecError, SpecProblem
    from yurt.runtime.jobspec import VarInputs

    files = []
    for name in _GIVEN["var_files"]:
        try:
            with open(name, encoding="utf-8") as fh:
                files.append((name, fh.read()))
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise JobSpecError(name, [SpecProblem(0, 0, "file", f"cannot read: {reason}")]
                               ) from None
    env = {k: v for k, v in os.environ.items() if k.startswith("NOMAD_VAR_")}
    return VarInputs(env=env, var_files=tuple(files), args=_GIVEN["vars"],
                     strict=_READ["strict"], allow_fs=True)


def _parse(path: str, inputs: VarInputs) -> tuple[Job, str]:
    """The job at `path` (`-`: stdin) and its text; a `JobSpecError` for any problem."""
    import dataclasses
    from pathlib import Path

    from yurt.runtime.errors import JobSpecError, SpecProblem
    from yurt.runtime.jobspec.parse import parse_job

    name = STDIN_NAME if path == "-" else path
    try:
        source = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise JobSpecError(name, [SpecProblem(0, 0, "file", f"cannot read: {reason}")]
                           ) from None
    base = os.getcwd() if path == "-" else str(Path(path).parent)
    inputs = dataclasses.replace(inputs, base_dir=inputs.base_dir or base)
    job = parse_job(source, filename=name, format="json" if _READ["json"] else None,
                    variables=inputs)
    return job, source


def load_job_with_submission(path: str) -> tuple[Job, dict[str, Any]]:
    """The job in the file at `path` and its submission (Nomad's api/jobs.go `JobSubmission`
    JSON); its problems, if any, end the command (exit 2)."""
    from yurt.runtime.errors import JobSpecError
    from yurt.runtime.jobspec.parse import detect_format

    try:
        inputs = variable_inputs()
        job, source = _parse(path, inputs)
    except JobSpecError as e:
        echo(e.render(), err=True)
        sys.exit(EXIT_USAGE)
    flags = {k.removeprefix("NOMAD_VAR_"): v for k, v in inputs.env.items()}
    flags.update(_flag(arg) for arg in inputs.args)
    return job, {
        "Source": source,
        "Format": "json" if _READ["json"] or detect_format(path, source) == "json"
        else "hcl2",
        "VariableFlags": flags or None,
        "Variables": "".join(f"{text}\n" for _, text in inputs.var_files),
    }


def _flag(arg: str) -> tuple[str, str]:
    """`-var NAME=VALUE` as jobspec2's `extractVarFlags` splits it (no `=`: an empty value)."""
    name, _, value = arg.partition("=")
    return name, value


def parse_job_file(path: str) -> Job:
    """The job at `path` (`-`: stdin), with the command's variables; raises `JobSpecError`."""
    return _parse(path, variable_inputs())[0]


def load_job_file(path: str) -> Job:
    """The job in the file at `path`; its problems, if any, end the command (exit 2)."""
    from yurt.runtime.errors import JobSpecError

    try:
        return _parse(path, variable_inputs())[0]
    except JobSpecError as e:
        echo(e.render(), err=True)
        sys.exit(EXIT_USAGE)
