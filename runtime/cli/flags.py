"""Nomad's single-dash long flags (`-detach`, `-tail`, `-verbose`) on click's command tree.

Nomad's CLI parses with Go's `flag` package, where `-name` and `--name` are the same flag;
click reads `-detach` as the cluster `-d -e -t ...` and answers `No such option: -d`. Users
coming from Nomad type the single-dash spelling by habit, so every long option accepts it.

How: before click parses, `nomad_spelling` follows the command path through the click tree
(group options, then the subcommand name, down to the command), then walks the tokens after
it as Go's `flag` package does: flags end at the first positional argument or at `--`; an
option that takes a value consumes the next token unless written `-name=value`. A token
`-name` (or `-name=value`) becomes `--name` when `--name` is an option of that command and
`-name` is not itself declared (a declared short option or single-dash spelling keeps its
meaning: `-n`, `-json`, `-stat`). An unknown `-word` becomes `--word` too unless its first
letter is a short option (`-fn` may be the cluster `-f -n`), so click's refusal names the
word the user typed rather than its first letter.

Invariants: nothing after the first positional argument is ever touched (`alloc exec ID
/bin/sh -c ...` passes its command through intact); only options of the command in hand are
looked at, never a global table; whatever is unknown is left for click to refuse; a command
that takes unknown options through (`alloc exec`) parses its own flags and is left alone.

Rejected: declaring every single-dash spelling on every option (a per-command list drifts,
and every `--help` would show each option twice); rewriting every `-word` blindly (breaks
short-option clusters and the values of options that start with a dash).

The module is pure (click objects in, a list out) and imported by `main()`: it loads nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from yurt.runtime.cli.lazy import subcommand


def _options(command: click.Command, help_names: Sequence[str]) -> dict[str, bool]:
    """Every spelling of the command's options, mapped to whether it takes a value."""
    table = {name: False for name in help_names}
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        takes_value = not param.is_flag and not param.count
        for name in (*param.opts, *param.secondary_opts):
            table[name] = takes_value
    return table


def nomad_spelling(root: click.Group, args: Sequence[str]) -> list[str]:
    """`args` with each Nomad-style `-name` rewritten to click's `--name` (see the module).

    Args:
        root: the command tree's root group.
        args: the command line after the program name.

    Returns:
        A new list; `args` itself is not changed.
    """
    out = list(args)
    help_names = list(root.context_settings.get("help_option_names", ["--help"]))
    command: click.Command = root
    i = 0
    while i < len(out):
        if command.context_settings.get("ignore_unknown_options"):
            return out  # the command parses its own flags (`alloc exec`, Go-style already)
        options = _options(command, help_names)
        token = out[i]
        if token == "--":
            return out
        if token == "-" or not token.startswith("-"):
            if isinstance(command, click.Group):
                sub = subcommand(command, token)
                if sub is None:  # click will say "No such command"
                    return out
                command = sub
                i += 1
                continue
            return out  # the first positional argument: flags end here, as in Go
        name, has_value, _ = token.partition("=")
        if name not in options and not name.startswith("--") and len(name) > 2:
            long_name = "-" + name
            # Also an unknown word whose first letter is no short option of the command: click
            # would refuse it as `-n` of `-nosuch`; as `--nosuch` its message names the word.
            if long_name in options or name[:2] not in options:
                out[i] = long_name + token[len(name):]
                name = long_name
        takes_value = options.get(name, False)
        i += 2 if takes_value and not has_value else 1
    return out
