"""`yurt status [ID]`: any object's status by its ID, as Nomad's command/status.go finds it.

No ID: the job list, as `yurt job status`. An ID (or a prefix of one): one prefix search over
every context (`/v1/search`, Context "all"), then the matching object's own status verb with
the same `-verbose`: a job → `job status`, an allocation → `alloc status`, a node → `node
status`, an evaluation → `eval status`, a deployment → `deployment status`, a namespace →
`namespace status`.

Which match wins is Nomad's rule (`StatusCommand.Run`): an object whose ID is exactly the
argument (the first match of its context) wins if it is the only such one; with no exact
match, the one context holding exactly one match wins, provided no other context holds one
and none holds several. Anything else is ambiguous: Nomad's "Multiple matches found for id"
and each context's matches on stderr, exit 1. No match, or a match only in a context with no
status verb here (node pools, variables): "Unable to resolve ID", exit 1.

yurt's supervisorctl-style list of every task (what `yurt status` printed before) is
`yurt tasks` (runtime/cli/node.py).

`resolve_context` is pure (the search's `Matches` in, the context out), so the rule is tested
without an agent.
"""

from __future__ import annotations

from typing import Any, Final

import click

from yurt.runtime.cli.ui_hint import ui_option, ui_requested

#: The status verb for each search context (Nomad's switch in `StatusCommand.Run`; quotas,
#: plugins and volumes have no verb here).
STATUS_VERBS: Final = {
    "evals": ("eval", "status"),
    "nodes": ("node", "status"),
    "allocs": ("alloc", "status"),
    "jobs": ("job", "status"),
    "deployment": ("deployment", "status"),
    "namespaces": ("namespace", "status"),
}


class Ambiguous(Exception):
    """Several objects match: the message lists them, as Nomad's `logMultiMatchError`."""


def multi_match_message(ident: str, matches: dict[str, list[str]]) -> str:
    """Nomad's `logMultiMatchError` text (contexts sorted: Go's map order is random)."""
    lines = [f'Multiple matches found for id "{ident}"']
    for context, found in sorted(matches.items()):
        if found:
            lines += ["", f"{context[:1].upper()}{context[1:]}:", ", ".join(found)]
    return "\n".join(lines)


def resolve_context(ident: str, matches: dict[str, list[str]]) -> str:
    """The context whose object `ident` names ("" for none), by Nomad's rule (module
    docstring). Pure.

    Raises:
        Ambiguous: several objects match.
    """
    exact = [c for c, found in matches.items() if found and found[0] == ident]
    if len(exact) > 1:
        raise Ambiguous(multi_match_message(ident, matches))
    if exact:
        return exact[0]
    single = [c for c, found in matches.items() if len(found) == 1]
    if len(single) > 1 or any(len(found) > 1 for found in matches.values()):
        raise Ambiguous(multi_match_message(ident, matches))
    return single[0] if single else ""


def status(ctx: click.Context, ident: str | None, verbose: bool) -> None:
    """`yurt status [ID]` (see the module docstring): finds the object, then runs its verb
    in `ctx` as if typed."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import fail

    args = ["--verbose"] if verbose else []
    if ident is None:
        _run(ctx, ("job", "status"), args)
        return
    with api() as client:
        found: dict[str, Any] = call(client, "POST", "/v1/search",
                                     json={"Prefix": ident, "Context": "all"})
    matches = {str(c): [str(i) for i in ids or []]
               for c, ids in (found.get("Matches") or {}).items()}
    try:
        context = resolve_context(ident, matches)
    except Ambiguous as e:
        fail(str(e))
    verb = STATUS_VERBS.get(context)
    if verb is None:
        fail(f'Unable to resolve ID: "{ident}"')
    # The object's whole ID: a prefix shared with another kind of object is settled here.
    _run(ctx, verb, [*args, matches[context][0]])


def _run(ctx: click.Context, verb: tuple[str, str], args: list[str]) -> None:
    """Run `yurt <group> <command> <args>` within this invocation (`-ui` is handed on in the
    context's meta: runtime/cli/ui_hint.py)."""
    from yurt.runtime.cli.output import fail
    from yurt.runtime.errors import EXIT_USAGE

    root = ctx.find_root().command
    assert isinstance(root, click.Group)
    group = root.get_command(ctx, verb[0])
    assert isinstance(group, click.Group)
    command = group.get_command(ctx, verb[1])
    assert command is not None
    if ui_requested(ctx) and not any(p.name == "ui" for p in command.params):
        fail(f"-ui: yurt's web UI has no page for `{' '.join(verb)}`", EXIT_USAGE)
    if "--verbose" in args and not any(p.name == "verbose" for p in command.params):
        args = [a for a in args if a != "--verbose"]
    with command.make_context(" ".join(verb), args, parent=ctx) as sub:
        command.invoke(sub)


def register(cli: click.Group) -> None:
    """Add `status` to `yurt` (called from runtime/cli/__init__.py)."""

    @cli.command("status")
    @click.argument("ident", metavar="[ID]", required=False)
    @click.option("-verbose", "--verbose", "verbose", is_flag=True,
                  help="Full IDs and the details the object's status verb adds with it.")
    @ui_option
    @click.pass_context
    def status_command(ctx: click.Context, ident: str | None, verbose: bool) -> None:
        """Any object's status by its ID or a prefix (a job, an allocation, a node, an
        evaluation, a deployment or a namespace), or the job list without one, as Nomad's
        `status`. The task list is `yurt tasks`."""
        status(ctx, ident, verbose)
