"""`yurt fmt`: job and agent files in HCL's canonical layout, as Nomad's command/fmt.go.

`yurt fmt [-check] [-list=true|false] [-write=true|false] [-recursive] [PATH...|-]` formats
`.nomad` and `.hcl` files (`.nomad.hcl` included) given as paths or found in given directories
(the current one with no path; subdirectories with `-recursive`), as Nomad's `FormatCommand`
does (`Run`, `fmt`, `processDir`, `processFile`):

- a file that would change is listed (its path on stdout, `-list`, default true) and
  rewritten (`-write`, default true); `-check` writes nothing and fails when a file would
  change; with `-list=false -write=false` the formatted text goes to stdout;
- `-` as the first argument reads stdin and writes the formatted text to stdout;
- a file that does not parse is not touched: its error goes to stderr as
  `FILE:LINE:COL: syntax: MESSAGE`; a path that does not exist, or a file named directly that
  is neither `.nomad` nor `.hcl`, is an error too.

Exit status, Nomad's: 0 all well, 1 a parse error, an unreadable or unwritable file, or with
`-check` a file that would change; 2 a usage error (yurt's exit for bad flags; Nomad's own
fmt exits 1 there).

The layout is runtime/lib/hclfmt.py's (hclwrite's `Format`, byte for byte). A file is
parsed first, by runtime/lib/hcltokens.py's scanner and then by the jobspec's HCL parser
(python-hcl2; Nomad's parses with hclsyntax before it formats), so a file that is not HCL is
never rewritten. The flags are Go's (`-list=false`, `-write=false`): the command parses its own
arguments, as `alloc exec` does, since a click flag cannot take `=false` and a click option
with a value would swallow the path after `-list`. The parser loads only when a file is read.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import click

from yurt.runtime.cli.goflags import (
    GO_FLAG_COMMAND,
    GoFlagError,
    HelpRequested,
    parse_go_flags,
)
from yurt.runtime.cli.output import echo, echo_bytes, echo_raw
from yurt.runtime.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

STDIN_PATH: Final = "<stdin>"
EXTENSIONS: Final = (".nomad", ".hcl")  # command/fmt.go `isNomadFile`: the last extension
USAGE: Final = "[-check] [-list=true|false] [-write=true|false] [-recursive] [PATH...|-]"


class FmtUsageError(Exception):
    """A flag Nomad's fmt would refuse, with Go's `flag` package wording."""


@dataclass
class FmtFlags:
    check: bool = False
    write: bool = True
    list: bool = True
    recursive: bool = False


def parse_flags(args: Sequence[str]) -> tuple[FmtFlags, list[str]]:
    """Go `flag` parsing of fmt's flags: (the flags, the paths). Flags end at the first
    argument that is not one (`-` included) or after `--`; every flag is a boolean, so none
    takes the next argument.

    Raises:
        FmtUsageError: an unknown flag, a bad boolean, or Nomad's `-token`.
        HelpRequested: `-h`, `-help` (`--help` is click's).
    """
    try:
        given, rest = parse_go_flags(args, booleans=("check", "write", "list", "recursive"))
    except GoFlagError as e:
        raise FmtUsageError(str(e)) from None
    flags = FmtFlags()
    for name, on in given.items():
        setattr(flags, name, on)
    return flags, rest


def syntax_problem(text: str) -> tuple[int, int, str] | None:
    """(line, column, message) of the first reason `text` is not HCL, or None."""
    from yurt.runtime.lib.hcltokens import HclSyntaxError, lex

    try:
        lex(text.removeprefix("\ufeff"))
    except HclSyntaxError as e:
        return e.line, e.column, e.message
    import lark

    from yurt.runtime.jobspec.grammar import parse_hcl

    try:
        parse_hcl(text.removeprefix("\ufeff"))
    except lark.exceptions.UnexpectedInput as e:
        line, column = getattr(e, "line", 0) or 0, getattr(e, "column", 0) or 0
        if isinstance(e, lark.exceptions.UnexpectedToken):
            if e.token.type == "$END":
                return line, column, "unexpected end of file"
            text = str(e.token)
            skipped = text[:len(text) - len(text.lstrip())]  # point at what was unexpected
            if "\n" in skipped:
                line, column = line + skipped.count("\n"), len(skipped.rsplit("\n", 1)[1]) + 1
            else:
                column += len(skipped)
            return line, column, f"unexpected {text.strip()!r}"
        if isinstance(e, lark.exceptions.UnexpectedCharacters):
            return line, column, f"unexpected character {e.char!r}"
        return line, column, "unexpected end of file"
    return None


@dataclass
class _Run:
    """One `yurt fmt`: what it does to each file, and what went wrong (Nomad's fields)."""

    flags: FmtFlags
    write_stdout: bool = False
    problems: list[str] = field(default_factory=list)  # parse errors, FILE:LINE:COL
    errors: list[str] = field(default_factory=list)  # files that could not be handled
    check_failed: bool = False

    def process(self, path: str, data: bytes) -> None:
        from yurt.runtime.lib.hclfmt import format_hcl

        try:
            text = data.decode()
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1
            column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
            self.problems.append(f"{path}:{line}:{column}: syntax: invalid UTF-8")
            return
        problem = syntax_problem(text)
        if problem is not None:
            line, column, message = problem
            self.problems.append(f"{path}:{line}:{column}: syntax: {message}")
            return
        out = format_hcl(text)
        if out != text:
            if self.flags.list:
                echo(path)
            if self.flags.check:
                self.check_failed = True
            if self.flags.write:
                try:
                    with open(path, "wb") as f:
                        f.write(out.encode())
                except OSError as e:
                    self.errors.append(f"Failed to write file {path}: {e.strerror}")
                    return
        if self.write_stdout:
            echo_bytes(out.encode())  # bytes: exactly the text, any locale

    def process_file(self, path: str) -> None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            self.errors.append(f"Failed to read file {path}: {e.strerror}")
            return
        self.process(path, data)

    def process_dir(self, path: str) -> None:
        try:
            entries = sorted(os.scandir(path), key=lambda entry: entry.name)
        except OSError:
            self.errors.append(f"Failed to list directory {path}")
            return
        for entry in entries:
            sub = os.path.normpath(os.path.join(path, entry.name))  # Go's filepath.Join
            if entry.is_dir(follow_symlinks=False):
                if self.flags.recursive:
                    self.process_dir(sub)
            elif entry.name.endswith(EXTENSIONS):
                self.process_file(sub)


def run_fmt(args: Sequence[str], help_text: str = "") -> int:
    """`yurt fmt ARGS`: the exit status (see the module); `help_text` answers `-h`."""
    try:
        flags, paths = parse_flags(args)
    except HelpRequested:
        echo_raw(help_text)
        return EXIT_OK
    except FmtUsageError as e:
        echo(f"yurt: {e}\nUsage: yurt fmt {USAGE}", err=True)
        return EXIT_USAGE
    run = _Run(flags)
    stdin = bool(paths) and paths[0] == "-"
    if stdin:
        run.write_stdout, flags.write, flags.list = True, False, False
    if flags.check:
        flags.write = False
    if not flags.list and not flags.write:
        run.write_stdout = True
    if stdin:
        run.process(STDIN_PATH, sys.stdin.buffer.read())
    for path in [] if stdin else (paths or ["."]):
        if not os.path.exists(path):
            run.errors.append(f"No file or directory at {path}")
        elif os.path.isdir(path):
            run.process_dir(path)
        elif path.endswith(EXTENSIONS):
            run.process_file(path)
        else:
            run.errors.append(f"Only .nomad and .hcl files can be processed using yurt fmt: "
                              f"{path}")
    for line in run.problems + [f"yurt: {e}" for e in run.errors]:
        echo(line, err=True)
    if run.problems or run.errors or run.check_failed:
        return EXIT_FAILED
    return EXIT_OK


def register(cli: click.Group) -> None:
    """Attach `fmt` to the root."""

    @cli.command("fmt", options_metavar="", context_settings=GO_FLAG_COMMAND)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar=USAGE)
    def fmt_command(args: tuple[str, ...]) -> None:
        """Rewrite Nomad job and agent files (.nomad, .hcl) in HCL's canonical layout, as
        `nomad fmt` does: indentation, spacing and aligned `=`; comments, strings and
        heredocs are kept.

        With no path, the files of the current directory (-recursive: and below it).
        -list (default true) prints each file that changes; -write (default true) rewrites
        it; -check writes nothing and exits 1 if a file would change; -list=false
        -write=false prints the formatted text. `-` formats stdin to stdout.
        Exit status: 0, 1 a file does not parse, cannot be read or written, or (-check)
        would change, 2 bad flags.
        """
        sys.exit(run_fmt(args, click.get_current_context().get_help()))
