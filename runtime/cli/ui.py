"""`yurt ui [-authenticate] [-show-url] [-namespace NS] [ID]`: Nomad's `nomad ui`
(command/ui.go `UiCommand.Run`), opening the agent's web UI in the default browser.

The address is the agent's (`$YURT_ADDR`), at `/ui/jobs`; an ID (a prefix, as Nomad's search
takes it) opens that job's, allocation's or client's page, found with a prefix search over
jobs, allocations and nodes (`/v1/search`, Context `all`) in Nomad's order and with its
messages: `Unable to resolve ID: "x"` (exit 1), `Multiple matches found for id "x"` and the
matches by kind (exit 2). `-authenticate` first trades the caller's token for a one-time
token (`PUT /v1/acl/token/onetime`, api/acl.go `UpsertOneTimeToken`) and adds its secret as
`?ott=`, which the UI exchanges for the token and takes out of its address bar
(runtime/ui/assets/session.js). `-show-url` prints `URL for web UI: <url>` instead of opening.

Invariants: the one-time secret is never on a command line, where every local user could read
it and exchange it first (`/proc/PID/cmdline` of the browser `webbrowser` starts): the browser
is given a page of this user's alone (0600, in a 0700 directory under `$XDG_RUNTIME_DIR` or
the temp dir) that sends it on to the link; pages older than a one-time token's life are
removed on the next run. It is printed only when asked (`-show-url`) or when no browser can
be started (then the link is the only way). Exit codes: 0 ok, 1 the agent refused or no such
object, 2 bad input.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote, urlencode

import click

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection

#: The contexts `nomad ui` opens, in its order (command/ui.go `uiContexts`), and their pages.
UI_CONTEXTS: Final = (("jobs", "Jobs"), ("allocs", "Allocs"), ("nodes", "Nodes"))
#: A one-time token's life (nomad/acl_endpoint.go `UpsertOneTimeToken`: 10 minutes): a
#: redirect page older than this holds a dead secret.
ONE_TIME_LIFE_S: Final = 10 * 60
PAGE_PREFIX: Final = "yurt-ui-"


def register(cli: click.Group) -> None:
    """Attach `ui` to the top-level group."""
    cli.add_command(ui_command)


@click.command("ui")
@click.argument("identifier", nargs=-1, metavar="[ID]")
@click.option("-authenticate", "--authenticate", "authenticate", is_flag=True,
              help="Exchange your token for a one-time token the web UI signs in with.")
@click.option("-show-url", "--show-url", "show_url", is_flag=True,
              help="Print the web UI's URL instead of opening it in the default browser.")
@click.option("-namespace", "--namespace", "namespace", default="",
              help="The namespace an ID is looked up in (default: default).")
def ui_command(identifier: tuple[str, ...], authenticate: bool, show_url: bool,
               namespace: str) -> None:
    """Open the web UI in the default browser, on a job's, allocation's or client's page
    when given its ID (or a prefix)."""
    from yurt.runtime.cli.api_client import api
    from yurt.runtime.cli.http import agent_address
    from yurt.runtime.cli.output import echo, fail
    from yurt.runtime.errors import EXIT_USAGE

    if len(identifier) > 1:
        fail("This command takes no or one optional argument, [<identifier>]", EXIT_USAGE)
    base = agent_address().rstrip("/")
    path = "/ui/jobs"
    secret = ""
    with api() as client:
        if identifier:  # first: an ID that names nothing wastes no one-time token
            path = page_path(client, identifier[0], namespace)
        if authenticate:
            secret = one_time_secret(client)
    url = base + path
    link = url + "?" + urlencode({"ott": secret}) if secret else url
    if show_url:
        echo(f"URL for web UI: {link}")
        return
    echo(f'Opening URL "{url}"' + (" with one-time token" if secret else ""))
    if not open_in_browser(link, secret=bool(secret)):
        echo("No browser could be started: open this address yourself.", err=True)
        echo(f"URL for web UI: {link}")


def one_time_secret(client: AgentConnection) -> str:
    """A new one-time token's secret, made with the caller's token; the agent's refusal ends
    the command with Nomad's `Could not get one-time token: …` (exit 1)."""
    from yurt.runtime.cli.output import fail

    response = client.put("/v1/acl/token/onetime", json={})
    if not response.is_success:
        text = response.text.strip() or f"HTTP {response.status_code}"
        if response.status_code == 403:
            text += " (set NOMAD_TOKEN, YURT_TOKEN or YURT_TOKEN_FILE to your ACL token)"
        elif response.status_code == 400:
            text += " (without ACLs the UI needs no sign-in: leave out -authenticate)"
        fail(f"Could not get one-time token: {text}")
    body = response.json() if response.content else None
    ott = (body or {}).get("OneTimeToken") or {}
    secret = ott.get("OneTimeSecretID")
    if not isinstance(secret, str) or not secret:
        fail("Could not get one-time token: the agent's answer holds no OneTimeSecretID")
    return secret


def page_path(client: AgentConnection, ident: str, namespace: str) -> str:
    """The UI path of the one job, allocation or node `ident` names (command/ui.go: an exact
    ID wins; one match in one context; anything else is ambiguous)."""
    from yurt.runtime.cli.output import fail
    from yurt.runtime.errors import EXIT_USAGE

    params = {"namespace": namespace} if namespace else {}
    response = client.post("/v1/search", params=params, json={"Prefix": ident, "Context": "all"})
    if not response.is_success:
        fail(f"Error querying search with id: {response.text.strip() or response.status_code}")
    matches: dict[str, list[str]] = (response.json() or {}).get("Matches") or {}
    found = resolve_match(ident, matches)
    if not found:
        fail(f'Unable to resolve ID: "{ident}"')
    if len(found) > 1:
        lines = [f'Multiple matches found for id "{ident}"']
        for context, title in UI_CONTEXTS:
            if matches.get(context):
                lines += [f"\n{title}:", ", ".join(matches[context])]
        fail("\n".join(lines), EXIT_USAGE)
    context, full_id = found[0]
    if context == "nodes":
        return f"/ui/clients/{quote(full_id, safe='')}"
    if context == "allocs":
        return f"/ui/allocations/{quote(full_id, safe='')}"
    # The UI's job address (runtime/ui/assets/lib.js `jobHref`): `@namespace` but for default.
    ns = namespace if namespace and namespace != "default" else "default" if "@" in full_id else ""
    return f"/ui/jobs/{quote(full_id, safe='')}" + (f"@{quote(ns, safe='')}" if ns else "")


def resolve_match(ident: str, matches: dict[str, list[str]]) -> list[tuple[str, str]]:
    """The `(context, ID)` objects `ident` names among `UI_CONTEXTS`' matches: one when it
    names one (an exact ID wins over prefixes), several when it is ambiguous, none."""
    for context, _ in UI_CONTEXTS:
        if ident in (matches.get(context) or []):
            return [(context, ident)]
    return [(context, found) for context, _ in UI_CONTEXTS
            for found in matches.get(context) or []]


# --------------------------------------------------------------------------- the browser


def open_in_browser(link: str, *, secret: bool) -> bool:
    """Opens `link` with Python's `webbrowser`; False when no browser could be started. A
    link holding a secret goes through `redirect_page` (see the module's invariants)."""
    import webbrowser

    target = redirect_page(link).as_uri() if secret else link
    try:
        return webbrowser.open(target)
    except webbrowser.Error:
        return False


def page_dir() -> Path:
    """This user's directory for redirect pages, 0700: under `$XDG_RUNTIME_DIR` (a tmpfs only
    its user may enter) when set, else in the temp dir, named by the user's ID."""
    import tempfile

    runtime = os.environ.get("XDG_RUNTIME_DIR")
    root = Path(runtime) if runtime and Path(runtime).is_dir() else Path(tempfile.gettempdir())
    folder = root / f"yurt-ui-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if folder.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o077:
        # Someone else's, or open to others (a shared temp dir): never write a secret there.
        folder = Path(tempfile.mkdtemp(prefix=PAGE_PREFIX))
    return folder


def redirect_page(link: str, *, now: float | None = None) -> Path:
    """A page (0600, in `page_dir`) that sends the browser to `link` at once, with no script
    (a refresh meta tag; the link escaped as an attribute). Pages from earlier runs older than
    a one-time token's life are removed first."""
    import tempfile

    folder = page_dir()
    clock = time.time() if now is None else now
    for old in folder.glob(f"{PAGE_PREFIX}*.html"):
        try:
            if clock - old.stat().st_mtime > ONE_TIME_LIFE_S:
                old.unlink()
        except OSError:
            pass  # gone already, or not ours to remove: it holds a dead secret either way
    body = redirect_html(link)
    fd, name = tempfile.mkstemp(prefix=PAGE_PREFIX, suffix=".html", dir=folder)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, body.encode())
    finally:
        os.close(fd)
    return Path(name)


def redirect_html(link: str) -> str:
    import html

    target = html.escape(link, quote=True)
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\">"
            "<meta name=\"referrer\" content=\"no-referrer\">"
            f"<meta http-equiv=\"refresh\" content=\"0; url={target}\">"
            "<title>yurt: signing in</title></head>"
            f"<body><p>Opening <a href=\"{target}\">the yurt web UI</a>…</p></body></html>\n")
