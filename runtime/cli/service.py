"""`yurt service list|info|delete` and `yurt alloc checks`: the Nomad-provider service
catalogue and an allocation's check results, through the agent at `$YURT_ADDR`, in the shape
of Nomad's command/service_list.go, service_info.go, service_delete.go and alloc_checks.go.

`register(cli)` adds the `service` group and attaches `checks` to the existing `alloc` group
(called once from runtime/cli/__init__.py, after `alloc` exists).

Output is Nomad's: `service list` a `Service Name|Tags` table (with a `Namespace` column when
the namespace asked is `*`), `service info` a `Job ID|Address|Tags|Node ID|Alloc ID` table (or
one `key = value` block per registration with `-verbose`), `alloc checks` a `Status of N Nomad
Service Checks` heading and one block per check. A service is named by its name or a unique
prefix of one (command/service_info.go `getServiceByPrefix`: an exact name wins; several
matches are listed). Empty results print Nomad's "No service registrations found", exit 0.

Exit codes: 0 ok, 1 the request failed or nothing matched (Nomad's 1), 2 bad input (an
ambiguous prefix, `-json` with `-t`). Heavy imports (the HTTP client) stay inside the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

import click

from yurt.runtime.cli.output import check_format, echo, emit, fail, format_kv, format_list
from yurt.runtime.cli.paging import filter_option, page_options
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

#: api.AllNamespacesNamespace: every namespace the token may read.
ALL_NAMESPACES = "*"


def request_namespace() -> str:
    """The namespace the command asks in: the general `-namespace`, `$YURT_NAMESPACE` or
    `$NOMAD_NAMESPACE` (runtime/cli/general.py `settings`), else "" (the agent's default)."""
    from yurt.runtime.cli.general import settings

    return settings().namespace


def _params(namespace: str) -> dict[str, str]:
    return {"namespace": namespace} if namespace else {}


def list_table(listing: list[dict[str, Any]], namespace: str) -> str:
    """Nomad's `formatServiceListOutput`: names sorted within namespaces sorted, tags sorted
    in brackets; a `Namespace` column only when listing `*`."""
    every = namespace == ALL_NAMESPACES
    rows = [["Service Name", *(["Namespace"] if every else []), "Tags"]]
    for entry in sorted(listing, key=lambda e: str(e["Namespace"])):
        for svc in sorted(entry.get("Services") or [], key=lambda s: str(s["ServiceName"])):
            tags = ",".join(sorted(svc.get("Tags") or []))
            rows.append([svc["ServiceName"], *([entry["Namespace"]] if every else []),
                         f"[{tags}]"])
    return format_list(rows)


def resolve_service(listing: list[dict[str, Any]], prefix: str
                    ) -> tuple[str, str, list[dict[str, Any]]]:
    """(namespace, name, ambiguous listing) for `prefix`, as Nomad's `getServiceByPrefix`:
    one match, or an exact name among several, wins; several leave the listing to show.

    Raises:
        LookupError: no service name begins with `prefix`.
    """
    matched = [{"Namespace": e["Namespace"],
                "Services": [s for s in e.get("Services") or []
                             if str(s["ServiceName"]).startswith(prefix)]}
               for e in listing]
    matched = [e for e in matched if e["Services"]]
    if not matched:
        raise LookupError(f'No service registrations with prefix "{prefix}" found')
    exact = [(e["Namespace"], s["ServiceName"]) for e in matched for s in e["Services"]
             if s["ServiceName"] == prefix]
    if len(matched) == 1 and len(matched[0]["Services"]) == 1:
        return matched[0]["Namespace"], matched[0]["Services"][0]["ServiceName"], []
    if len(exact) == 1:
        return exact[0][0], exact[0][1], []
    return "", "", matched


def _address(address: str, port: int) -> str:
    """Go's `net.JoinHostPort` unless the port is 0 (command/service_info.go)."""
    if not port:
        return address
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def info_table(regs: list[dict[str, Any]]) -> str:
    """`service info`'s table: registrations grouped by job ID, jobs sorted."""
    rows = [["Job ID", "Address", "Tags", "Node ID", "Alloc ID"]]
    for r in sorted(regs, key=lambda r: str(r["JobID"])):  # stable: API order within a job
        rows.append([r["JobID"], _address(r["Address"], r["Port"]),
                     f"[{','.join(r.get('Tags') or [])}]", r["NodeID"][:8], r["AllocID"][:8]])
    return format_list(rows)


def info_verbose(regs: list[dict[str, Any]]) -> str:
    blocks = [format_kv([
        ("ID", r["ID"]), ("Service Name", r["ServiceName"]), ("Namespace", r["Namespace"]),
        ("Job ID", r["JobID"]), ("Alloc ID", r["AllocID"]), ("Node ID", r["NodeID"]),
        ("Datacenter", r["Datacenter"]), ("Address", f"{r['Address']}:{r['Port']}"),
        ("Tags", f"[{','.join(r.get('Tags') or [])}]")]) + "\n"
        for r in sorted(regs, key=lambda r: str(r["JobID"]))]
    return "\n".join(blocks)


def checks_text(checks: dict[str, dict[str, Any]]) -> str:
    """Nomad's `alloc checks` output: a heading, then one `key = value` block per check."""
    out = [f"Status of {len(checks)} Nomad Service Checks", ""]
    for check in checks.values():
        pairs = [("ID", check["ID"]), ("Name", check["Check"]), ("Group", check["Group"]),
                 ("Task", check.get("Task") or "(group)"), ("Service", check["Service"]),
                 ("Status", check["Status"])]
        if check.get("StatusCode", 0) > 0:
            pairs.append(("StatusCode", str(check["StatusCode"])))
        stamp = datetime.fromtimestamp(check["Timestamp"]).astimezone().isoformat()
        pairs += [("Mode", check["Mode"]), ("Timestamp", stamp), ("Output", check["Output"])]
        out += [format_list([[k, "=", v] for k, v in pairs]), ""]
    return "\n".join(out).rstrip("\n")


def _json_flag() -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option("-json", "--json", "json_output", is_flag=True,
                        help="Print the API's JSON instead of text.")


def _template_flag() -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option("-t", "template", default="", metavar="TEMPLATE",
                        help="Format the API's data with a Go template (Nomad's -t).")


def register(cli: click.Group) -> None:
    """Add `service list|info|delete` to `yurt`."""
    json_flag, template_flag = _json_flag(), _template_flag()

    @cli.group("service")
    def service() -> None:
        """Nomad-provider services: list, inspect and delete their registrations."""

    @service.command("list")
    @json_flag
    @template_flag
    def service_list(json_output: bool, template: str) -> None:
        """List the registered services (of every namespace with $NOMAD_NAMESPACE=*)."""
        from yurt.runtime.cli.api_client import api, call

        check_format(json_output, template)
        namespace = request_namespace()
        with api() as client:
            listing = call(client, "GET", "/v1/services", params=_params(namespace))
        if not listing:
            echo("No service registrations found")
            return
        emit(listing, json_output, template, lambda: echo(list_table(listing, namespace)))

    @service.command("info")
    @click.argument("name", metavar="SERVICE_NAME")
    @click.option("-verbose", "--verbose", is_flag=True, help="Display full information.")
    @page_options
    @filter_option
    @json_flag
    @template_flag
    def service_info(name: str, verbose: bool, per_page: int, page_token: str,
                     filter_expr: str, json_output: bool, template: str) -> None:
        """Show the registrations of one service (its name, or a unique prefix)."""
        from yurt.runtime.cli.api_client import api, call
        from yurt.runtime.cli.paging import args_with_new_page_token, get_page, page_params

        check_format(json_output, template)
        namespace = request_namespace()
        with api() as client:
            listing = call(client, "GET", "/v1/services", params=_params(namespace))
            try:
                ns, found, possible = resolve_service(listing or [], name)
            except LookupError as e:
                fail(f"Error listing service registrations: {e}", EXIT_FAILED)
            if possible:
                fail("Prefix matched multiple services\n\n" + list_table(possible, namespace),
                     EXIT_USAGE)
            regs, next_token = get_page(client, f"/v1/service/{quote(found, safe='')}", {
                **_params(ns), **page_params(filter_expr, per_page, page_token)})
        if not regs:
            echo("No service registrations found")
            return

        def human() -> None:
            echo(info_verbose(regs) if verbose else info_table(regs))
            if next_token:  # command/service_info.go's footer
                echo("\nResults have been paginated. To get the next page run: \n\n"
                     f"{args_with_new_page_token(sys.argv, next_token)} ")
        emit(regs, json_output, template, human)

    @service.command("delete")
    @click.argument("name", metavar="SERVICE_NAME")
    @click.argument("service_id", metavar="SERVICE_ID")
    def service_delete(name: str, service_id: str) -> None:
        """Delete one registration of a service (by its full ID)."""
        from yurt.runtime.cli.api_client import api

        with api() as client:
            response = client.request(
                "DELETE", f"/v1/service/{quote(name, safe='')}/{quote(service_id, safe='')}",
                params=_params(request_namespace()))
        if response.status_code >= 400:
            fail("Error deleting service registration: " + response.text.strip(),
                 EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)
        echo("Successfully deleted service registration")



def register_alloc_checks(alloc: click.Group) -> None:
    """Add `alloc checks` to the `alloc` group (runtime/cli/alloc_group.py)."""
    json_flag, template_flag = _json_flag(), _template_flag()

    @alloc.command("checks")
    @click.argument("alloc_id", metavar="ALLOC")
    @click.option("-verbose", "--verbose", is_flag=True, help="Show full IDs.")
    @json_flag
    @template_flag
    def alloc_checks(alloc_id: str, verbose: bool, json_output: bool, template: str) -> None:
        """The latest results of the allocation's Nomad-provider service checks."""
        from yurt.runtime.cli.api_client import api, resolve_alloc

        check_format(json_output, template)
        with api() as client:
            full = resolve_alloc(client, alloc_id)
            response = client.request("GET", f"/v1/client/allocation/{full}/checks")
            if response.status_code >= 400:
                fail("Error querying allocation checks: " + response.text.strip())
            checks = response.json()
        emit(checks, json_output, template, lambda: echo(checks_text(checks)))
