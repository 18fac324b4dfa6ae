"""Nomad's `-ui` flag and its web UI hint on the commands that have one (command/meta.go
`CommandUIRoutes`, `showUIPath`, `formatUIHint`): after its output a command names the web
UI's page of what it showed — `==> View this job in the Web UI: <address>/ui/jobs/web` on
stderr — and with `-ui` opens that page in the default browser (Python's `webbrowser`, which
honours `$BROWSER`, as Nomad's helper/util `OpenURL` starts the desktop's opener).

`ui_option` is the one-line decorator a command takes; it stores the flag in the click
context's `meta` (shared with sub-contexts: `yurt status -ui ID` hands it to the verb it runs),
so the command's signature does not change. `ui_hint(route, **params)` is the one call at the
end of the command's text output. Routes are Nomad's, mapped onto yurt's UI (runtime/ui/assets
app.js `ROUTES`); where yurt's UI has no such page the route names the nearest one (servers:
the clients list) or `refuse_ui` refuses the flag (variables: no page), as
scripts/cli_compat_notes.json says.

Invariants: the hint is printed when `-ui` is given or `$NOMAD_CLI_SHOW_HINTS` is true, and
never when it is false (meta.go `uiHintsDisabled`; yurt does not print it unasked, so scripts
reading stderr see nothing new); it never holds a token (no `-authenticate` here: that is
`yurt ui -authenticate`'s one-time token). A browser that cannot be started is a warning, not
a failure: the command's own work is done (meta.go `showUIPath`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final, TypeVar
from urllib.parse import quote

import click

F = TypeVar("F", bound=Callable[..., Any])

META_KEY: Final = "yurt.open_ui"
HINTS_ENV: Final = "NOMAD_CLI_SHOW_HINTS"

#: Nomad's route name -> (yurt's UI path with `:param`s, Nomad's description).
ROUTES: Final[dict[str, tuple[str, str]]] = {
    # No servers page in yurt's UI: the clients list, where a single agent is its own node.
    "server members": ("/clients", "View and manage Nomad clients"),
    "node status": ("/clients", "View and manage Nomad clients"),
    "node status single": ("/clients/:nodeID", "View client details and metrics"),
    "job status": ("/jobs", "View and manage Nomad jobs"),
    "job status single": ("/jobs/:job", "View job details and metrics"),
    "job run": ("/jobs/:job", "View this job"),
    "job dispatch": ("/jobs/:job", "View this job"),
    "alloc status": ("/allocations/:allocID", "View allocation details"),
    "eval list": ("/evaluations", "View evaluations"),
    "eval status": ("/evaluations?currentEval=:evalID", "View evaluation details"),
    "deployment status": ("/jobs/:job/deployments", "View all deployments for this job"),
}


def _store(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:  # a verb run by `yurt status` keeps the flag its caller was given
        ctx.meta[META_KEY] = True


def ui_option(f: F) -> F:
    """The `-ui` flag (not passed to the command: read by `ui_hint`)."""
    return click.option("-ui", "--ui", "ui", is_flag=True, expose_value=False,
                        callback=_store,
                        help="Open this command's page of the web UI in the default browser.")(f)


def refuse_ui(what: str) -> Callable[[F], F]:
    """A `-ui` flag that is refused: yurt's web UI has no page for `what`."""

    def refuse(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            raise click.UsageError(f"-ui: yurt's web UI has no page for {what}", ctx)

    def decorate(f: F) -> F:
        return click.option("-ui", "--ui", "ui", is_flag=True, expose_value=False,
                            callback=refuse, help=f"Refused: the web UI has no {what} page.")(f)

    return decorate


def ui_requested(ctx: click.Context | None = None) -> bool:
    """Whether `-ui` was given to this command (or to `yurt status`, which ran it)."""
    ctx = ctx or click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get(META_KEY))


def hints_setting(environ: dict[str, str] | None = None) -> bool | None:
    """`$NOMAD_CLI_SHOW_HINTS` as Go's strconv.ParseBool reads it; None when unset or bad."""
    raw = (os.environ if environ is None else environ).get(HINTS_ENV, "")
    if raw in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if raw in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def job_ref(job_id: str, namespace: str | None) -> str:
    """A job's part of a UI path (runtime/ui/assets/lib.js `jobHref`): `id@namespace`, the
    namespace left out when it is the default one unless the ID itself holds an `@`."""
    ns = namespace if namespace and namespace != "default" else "default" if "@" in job_id else ""
    return quote(job_id, safe="") + (f"@{quote(ns, safe='')}" if ns else "")


def ui_url(route: str, base: str, **params: str) -> tuple[str, str]:
    """The page's address and the hint's description for `route` (a key of `ROUTES`).
    `params` are put in as given (already quoted: `job_ref`), others quoted here."""
    path, description = ROUTES[route]
    for name, value in params.items():
        path = path.replace(f":{name}", value if name == "job" else quote(value, safe=""))
    return f"{base.rstrip('/')}/ui{path}", description


def hint_text(url: str, description: str) -> str:
    """Nomad's hint (meta.go `formatUIHint`, without colours)."""
    return f"\n\n==> {description} in the Web UI: {url}"


def ui_hint(route: str, **params: str) -> str | None:
    """After a command's text output: opens the page with `-ui`, and prints the hint on
    stderr when shown (see the module's invariants). Returns the page's address when it did
    anything, else None."""
    import webbrowser

    from yurt.runtime.cli.http import agent_address
    from yurt.runtime.cli.output import echo

    opening = ui_requested()
    shown = hints_setting()
    if not opening and not shown:
        return None
    url, description = ui_url(route, agent_address(), **params)
    if opening:
        try:
            started = webbrowser.open(url)
        except webbrowser.Error as e:
            started, why = False, str(e)
        else:
            why = "no browser could be started"
        if not started:
            echo(f"Failed to open browser: {why}", err=True)
    if shown is not False:
        echo(hint_text(url, description), err=True)
    return url


__all__ = ("ROUTES", "hint_text", "hints_setting", "job_ref", "refuse_ui", "ui_hint",
           "ui_option", "ui_requested", "ui_url")
