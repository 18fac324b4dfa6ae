"""`yurt volume create|register|delete|status`: Nomad's volume verbs for dynamic host volumes
(command/volume_create.go, volume_create_host.go, volume_register_host.go, volume_delete.go,
volume_status.go, volume_status_host.go), their output in Nomad's words.

    yurt volume create [-detach] [-verbose] [-id ID] FILE|-     type = "host" specs
    yurt volume register [-id ID] FILE|-                         a directory already there
    yurt volume delete [-type host|csi] [-force] ID              ID or a unique prefix/name
    yurt volume status [-type host|csi] [-short] [-verbose] [-node ID] [-node-pool P]
                       [-json] [-t T] [ID]

yurt has no CSI plugins: `-type csi` lists none and finds none. One difference: `volume
delete` takes `-type host` when not told (Nomad's default, csi, could only fail here).
Pure formatting (`format_volume`, `format_volumes`, `ibytes`) is separate from the HTTP calls.
Exit codes: 0 ok, 1 failed (refused, not found), 2 bad input.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, Final

import click

from yurt.runtime.cli.output import echo, emit, fail, format_kv, format_list
from yurt.runtime.cli.statusfmt import alloc_list, limit
from yurt.runtime.errors import EXIT_USAGE

SHORT_ID: Final = 8
FULL_ID: Final = 36
_UUID: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_IEC: Final = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def ibytes(size: int) -> str:
    """go-humanize `IBytes`: "0 B", "1.0 KiB", "10 GiB"."""
    if size < 10:
        return f"{size} B"
    exp = min(math.floor(math.log(size, 1024)), len(_IEC) - 1)
    value = math.floor(size / 1024**exp * 10 + 0.5) / 10
    return f"{value:.1f} {_IEC[exp]}" if value < 10 else f"{value:.0f} {_IEC[exp]}"


def format_volumes(vols: list[dict[str, Any]], length: int) -> str:
    """volume_status_host.go `formatHostVolumes`, in ID order."""
    rows = [["ID", "Name", "Namespace", "Plugin ID", "Node ID", "Node Pool", "State"]]
    rows += [[limit(v["ID"], length), v.get("Name", ""), v.get("Namespace", ""),
              v.get("PluginID", ""), limit(v.get("NodeID", ""), length),
              v.get("NodePool", ""), v.get("State", "")]
             for v in sorted(vols, key=lambda v: str(v["ID"]))]
    return format_list(rows)


def format_volume(vol: dict[str, Any], *, short: bool, verbose: bool, length: int) -> str:
    """volume_status_host.go `formatHostVolume`: its fields; unless `short`, its
    capabilities and the allocations that claim it."""
    head = format_kv([
        ("ID", vol["ID"]), ("Name", vol.get("Name", "")),
        ("Namespace", vol.get("Namespace", "")), ("Plugin ID", vol.get("PluginID", "")),
        ("Node ID", vol.get("NodeID", "")), ("Node Pool", vol.get("NodePool", "")),
        ("Capacity", ibytes(int(vol.get("CapacityBytes") or 0))),
        ("State", vol.get("State", "")), ("Host Path", vol.get("HostPath", ""))])
    if short:
        return head
    caps = format_list([["Access Mode", "Attachment Mode"], *(
        [c.get("AccessMode", ""), c.get("AttachmentMode", "")]
        for c in vol.get("RequestedCapabilities") or [])])
    allocs = alloc_list(vol.get("Allocations") or [], verbose, length)
    return "\n".join([head, "\nCapabilities", caps, "\nAllocations", allocs])


def _by_prefix(client: Any, prefix: str, namespace: str = ""
               ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """volume_status_host.go `getHostVolumeByPrefix`: the one volume (an exact ID or name
    wins), or the candidates when the prefix is ambiguous."""
    from yurt.runtime.cli.api_client import call

    params = {"type": "host", "prefix": prefix}
    if namespace:
        params["namespace"] = namespace
    vols = call(client, "GET", "/v1/volumes", params=params) or []
    if not vols:
        raise LookupError(f'no volumes with prefix or ID "{prefix}" found')
    if len(vols) == 1:
        return vols[0], []
    exact = [v for v in vols if prefix in (v["ID"], v.get("Name"))]
    return (exact[0], []) if len(exact) == 1 else (None, vols)


def _resolve(client: Any, prefix: str, namespace: str, context: str) -> dict[str, Any]:
    try:
        found, possible = _by_prefix(client, prefix, namespace)
    except LookupError as e:
        fail(f"{context}: {e}")
    if found is None:
        fail(f"Prefix matched multiple volumes\n\n{format_volumes(possible, SHORT_ID)}")
    return found


def _read_spec(path: str) -> tuple[str, dict[str, Any]]:
    from yurt.runtime.cli.volume_spec import VolumeSpecError, parse_volume_spec

    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"Failed to read file: {getattr(e, 'strerror', None) or e}")
    try:
        return parse_volume_spec(text, "<stdin>" if path == "-" else path)
    except VolumeSpecError as e:
        fail(f"Error parsing the volume: {e}", EXIT_USAGE)


def _host_spec(path: str) -> dict[str, Any]:
    kind, vol = _read_spec(path)
    if kind.lower() == "csi":
        fail("Error creating volume: yurt has no CSI plugins (only type = \"host\")")
    if kind.lower() != "host":
        fail(f"Error unknown volume type: {kind}")
    return vol


def register(cli: click.Group) -> None:
    """Add `volume create|register|delete|status` to `yurt`."""

    @cli.group("volume")
    def volume() -> None:
        """Dynamic host volumes: create, register, delete and inspect them."""

    @volume.command("create")
    @click.option("-detach", "--detach", is_flag=True,
                  help="Return at once instead of monitoring the volume until ready.")
    @click.option("-verbose", "--verbose", is_flag=True, help="Full IDs when monitoring.")
    @click.option("-policy-override", "--policy-override", is_flag=True,
                  help="Accepted: Sentinel policies are Enterprise-only.")
    @click.option("-id", "--id", "vol_id", default="", metavar="ID",
                  help="Update the volume of this ID (or prefix) instead.")
    @click.argument("path", metavar="INPUT")
    def create(detach: bool, verbose: bool, policy_override: bool, vol_id: str,
               path: str) -> None:
        """Create a dynamic host volume from a file ("-": stdin) on a node's plugin."""
        from yurt.runtime.cli.api_client import api

        vol = _host_spec(path)
        with api() as client:
            response = _submit(client, "create", vol, vol_id, policy_override)
            made = response.json()["Volume"]
            if detach or made["State"] == "ready":
                echo(f"Created host volume {made['Name']} with ID {made['ID']}")
                return
            echo(f"==> Created host volume {made['Name']} with ID {made['ID']}")
            length = FULL_ID if verbose else SHORT_ID
            echo(f'==> Monitoring volume "{limit(made["ID"], length)}"...')
            index = int(response.json().get("Index") or 0)
            params = {"namespace": made["Namespace"]}
            while True:
                got = client.request("GET", f"/v1/volume/host/{made['ID']}",
                                     params={**params, "index": str(index), "wait": "5s"})
                _fail_with(got, "Error querying volume")
                index = int(got.headers.get("X-Nomad-Index") or index)
                state = got.json()["State"]
                if state in ("ready", "unavailable"):
                    echo(f'==> Volume "{limit(made["Name"], length)}" {state}')
                    return

    @volume.command("register")
    @click.option("-policy-override", "--policy-override", is_flag=True,
                  help="Accepted: Sentinel policies are Enterprise-only.")
    @click.option("-id", "--id", "vol_id", default="", metavar="ID",
                  help="Update the volume of this ID (or prefix) instead.")
    @click.argument("path", metavar="INPUT")
    def register_volume(policy_override: bool, vol_id: str, path: str) -> None:
        """Register a host volume whose directory exists on a node already."""
        from yurt.runtime.cli.api_client import api

        vol = _host_spec(path)
        if not vol.get("NodeID"):
            fail("Node ID is required for registering")
        with api() as client:
            made = _submit(client, "register", vol, vol_id, policy_override).json()["Volume"]
        echo(f"Registered host volume {made['Name']} with ID {made['ID']}")

    @volume.command("delete")
    @click.option("-type", "--type", "kind", default="host",
                  type=click.Choice(["host", "csi"]), help="The volume's type.")
    @click.option("-force", "--force", is_flag=True,
                  help="Remove a volume whose node is gone.")
    @click.option("-secret", "--secret", multiple=True, metavar="KEY=VALUE",
                  help="CSI snapshot secrets (yurt has no CSI).")
    @click.argument("vol_id", metavar="ID")
    def delete(kind: str, force: bool, secret: tuple[str, ...], vol_id: str) -> None:
        """Delete a dynamic host volume (its plugin removes it from the node)."""
        from urllib.parse import quote

        from yurt.runtime.cli.api_client import api

        if kind == "csi":
            fail("Could not find existing CSI volume to delete: yurt has no CSI volumes")
        with api() as client:
            params: dict[str, str] = {}
            if not _UUID.match(vol_id):
                found = _resolve(client, vol_id, "",
                                 "Could not find existing host volume to delete")
                vol_id, params["namespace"] = found["ID"], found["Namespace"]
            if force:
                params["force"] = "true"
            response = client.request("DELETE", f"/v1/volume/host/{quote(vol_id, safe='')}",
                                      params=params)
            _fail_with(response, "Error deleting volume")
        echo(f'Successfully deleted volume "{vol_id}"!')

    @volume.command("status")
    @click.option("-type", "--type", "kind", default="",
                  help="host or csi (default: both for a list; whichever has the ID).")
    @click.option("-short", "--short", is_flag=True, help="Only the volume's fields.")
    @click.option("-verbose", "--verbose", is_flag=True, help="Full IDs.")
    @click.option("-node", "--node", "node_id", default="", metavar="ID",
                  help="Only volumes on this node (lists only).")
    @click.option("-node-pool", "--node-pool", "node_pool", default="", metavar="POOL",
                  help="Only volumes in this node pool (lists only).")
    @click.option("-json", "--json", "json_output", is_flag=True,
                  help="Print the API's JSON instead of text.")
    @click.option("-t", "template", default="", metavar="TEMPLATE",
                  help="Format the API's data with a Go template.")
    @click.argument("vol_id", metavar="[ID]", required=False, default="")
    def status(kind: str, short: bool, verbose: bool, node_id: str, node_pool: str,
               json_output: bool, template: str, vol_id: str) -> None:
        """The volumes, or one volume's details."""
        from yurt.runtime.cli.api_client import api, call

        if kind not in ("", "host", "csi"):
            fail(f'No such volume type "{kind}"')
        if kind == "csi" and (node_id or node_pool):
            fail("-node and -node-pool can only be used with -type host")
        if vol_id and (node_id or node_pool):
            fail("-node or -node-pool options can only be used when no ID is provided")
        length = FULL_ID if verbose else SHORT_ID
        formatted = json_output or bool(template)
        with api() as client:
            if not vol_id:
                if kind in ("", "host"):
                    if not formatted:
                        echo("Dynamic Host Volumes")
                    params = {"type": "host", "node_id": node_id, "node_pool": node_pool}
                    vols = call(client, "GET", "/v1/volumes",
                                params={k: v for k, v in params.items() if v}) or []
                    if not vols and not formatted:
                        echo("No dynamic host volumes", err=True)
                    else:
                        emit(sorted(vols, key=lambda v: str(v["ID"])), json_output, template,
                             lambda: echo(format_volumes(vols, length)))
                if kind in ("", "csi"):
                    if kind == "":
                        echo("")
                    if not formatted:
                        echo("Container Storage Interface")
                    echo("No CSI volumes", err=True)
                return
            if kind == "csi":
                fail(f'Error querying volume: no volumes with prefix or ID "{vol_id}" found')
            try:
                found, possible = _by_prefix(client, vol_id)
            except LookupError as e:
                fail(f"Error listing host volumes: {e}")
            if found is None:
                fail("Prefix matched multiple host volumes\n\n"
                     + format_volumes(possible, length))
            vol = call(client, "GET", f"/v1/volume/host/{found['ID']}",
                       params={"namespace": found["Namespace"]})
        emit(vol, json_output, template,
             lambda: echo(format_volume(vol, short=short, verbose=verbose, length=length)))


def _submit(client: Any, verb: str, vol: dict[str, Any], vol_id: str,
            policy_override: bool) -> Any:
    """`PUT /v1/volume/host/<verb>` (create or register) of `vol`, updating the volume
    `vol_id` names when given; the answer, refused with Nomad's "Error creating volume" /
    "Error registering volume" on failure."""
    if vol_id:
        vol["ID"] = _resolve(client, vol_id, vol.get("Namespace", ""),
                             "Could not update existing volume")["ID"]
    response = client.request("PUT", f"/v1/volume/host/{verb}", json={
        "Volume": vol, "PolicyOverride": policy_override})
    _fail_with(response, "Error creating volume" if verb == "create"
               else "Error registering volume")
    return response


def _fail_with(response: Any, context: str) -> None:
    from yurt.runtime.cli.api_client import fail_on_error

    fail_on_error(response, context)
