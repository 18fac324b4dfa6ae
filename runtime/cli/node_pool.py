"""`yurt node pool apply|list|info|delete|jobs|nodes`: Nomad's node pool verbs
(command/node_pool_*.go), their output in Nomad's words.

    yurt node pool apply [-json] FILE|-    node_pool "gpu" { description = "…" meta { … } }
    yurt node pool list [-json] [-t T]
    yurt node pool info [-json] [-t T] POOL   a name or a unique prefix of one
    yurt node pool delete POOL
    yurt node pool jobs [-json] [-t T] POOL
    yurt node pool nodes [-json] [-t T] [-verbose] POOL

Pure formatting (`format_pool_list`, `format_pool_info`, `format_node_stubs`,
`parse_pool_spec`) is separate from the HTTP calls, so it is tested without an agent. Exit
codes: 0 ok, 1 failed (refused, not found), 2 bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from yurt.runtime.cli.output import echo, emit, fail, format_kv, format_list, output_options
from yurt.runtime.cli.paging import filter_option, page_options
from yurt.runtime.errors import EXIT_USAGE

SHORT_ID = 8


def format_pool_list(pools: list[dict[str, Any]]) -> str:
    """Nomad's `formatNodePoolList`."""
    return format_list([["Name", "Description"],
                        *([p["Name"], p.get("Description") or ""] for p in pools)])


def format_pool_info(pool: dict[str, Any]) -> str:
    """`nomad node pool info`: the pool, its metadata, its scheduler configuration."""
    lines = [format_kv([("Name", pool["Name"]), ("Description", pool.get("Description") or "")]),
             "", "Metadata"]
    meta = pool.get("Meta") or {}
    lines.append(format_kv(sorted(meta.items())) if meta else "No metadata")
    lines += ["", "Scheduler Configuration"]
    sched = pool.get("SchedulerConfiguration") or {}
    pairs = [("Scheduler Algorithm", str(sched["SchedulerAlgorithm"]))
             ] if sched.get("SchedulerAlgorithm") else []
    if sched.get("MemoryOversubscriptionEnabled") is not None:
        pairs.append(("Memory Oversubscription Enabled",
                      str(sched["MemoryOversubscriptionEnabled"]).lower()))
    lines.append(format_kv(pairs) if pairs else "No scheduler configuration")
    return "\n".join(lines)


def format_node_stubs(nodes: list[dict[str, Any]], verbose: bool = False) -> str:
    """Nomad's `formatNodeStubList` (command/node_status.go)."""
    return format_list([["ID", "DC", "Name", "Class", "Drain", "Eligibility", "Status"], *(
        [n["ID"] if verbose else n["ID"][:SHORT_ID], n["Datacenter"], n["Name"],
         n.get("NodeClass") or "", str(bool(n.get("Drain"))).lower(),
         n["SchedulingEligibility"], n["Status"]] for n in nodes)])


def _unquote(value: Any) -> Any:
    """python-hcl2 keeps a string's quotes: the string itself."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return json.loads(value)
    if isinstance(value, dict):
        return {_unquote(k): _unquote(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [_unquote(v) for v in value]
    return value


def parse_pool_spec(text: str, as_json: bool) -> dict[str, Any]:
    """The API's NodePool from a spec file: HCL `node_pool "name" { description, meta {} }`
    or, with `as_json`, the API's JSON. ValueError says what is wrong."""
    if as_json:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("expected a JSON object")
        return doc
    import hcl2
    import lark

    try:
        doc = _unquote(hcl2.loads(text + "\n"))
    except (lark.exceptions.LarkError, ValueError) as e:
        raise ValueError(str(e).strip().splitlines()[0]) from None
    blocks = doc.get("node_pool") if isinstance(doc, dict) else None
    if not isinstance(blocks, list) or len(blocks) != 1 or len(blocks[0]) != 1:
        raise ValueError('expected one block node_pool "<name>" { … }')
    ((name, body),) = blocks[0].items()
    unknown = set(body) - {"description", "meta", "scheduler_config"}
    if unknown:
        raise ValueError(f'unknown field "{sorted(unknown)[0]}" in node_pool "{name}"')
    pool: dict[str, Any] = {"Name": name, "Description": body.get("description", "")}
    meta = body.get("meta")
    if meta:
        pool["Meta"] = {k: str(v) for k, v in (meta[0] if isinstance(meta, list)
                                               else meta).items()}
    sched = body.get("scheduler_config")
    if sched:
        sched = sched[0] if isinstance(sched, list) else sched
        pool["SchedulerConfiguration"] = {
            "SchedulerAlgorithm": sched.get("scheduler_algorithm", ""),
            "MemoryOversubscriptionEnabled": sched.get("memory_oversubscription_enabled")}
    return pool


def _find(client: Any, prefix: str) -> dict[str, Any]:
    """Nomad's `nodePoolByPrefix`: the one pool the prefix names (an exact name wins)."""
    from yurt.runtime.cli.api_client import call

    pools = call(client, "GET", "/v1/node/pools", params={"prefix": prefix})
    exact = [p for p in pools if p["Name"] == prefix]
    if len(pools) == 1 or exact:
        return dict((exact or pools)[0])
    if not pools:
        fail(f'Error retrieving node pool: No node pool with prefix "{prefix}" found')
    fail(f"Prefix matched multiple node pools\n\n{format_pool_list(pools)}")


def register(node: click.Group) -> None:
    """Attach `pool` and its verbs to the `node` group (runtime/cli/__init__.py)."""

    @node.group("pool")
    def pool_group() -> None:
        """Node pools: groups of nodes that jobs are placed in."""

    @pool_group.command("apply")
    @click.option("-json", "--json", "as_json", is_flag=True,
                  help="Parse the input as a JSON node pool specification.")
    @click.argument("path", metavar="INPUT")
    def apply(as_json: bool, path: str) -> None:
        """Create or update a node pool from a file ("-": stdin)."""
        from yurt.runtime.cli.api_client import api, call

        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except OSError as e:
            fail(f'Failed to read file "{path}": {e.strerror}', EXIT_USAGE)
        try:
            pool = parse_pool_spec(text, as_json)
        except ValueError as e:
            fail(f"Failed to parse input content: {e}", EXIT_USAGE)
        with api() as client:
            call(client, "PUT", "/v1/node/pools", json=pool)
        echo(f'Successfully applied node pool "{pool.get("Name", "")}"!')

    @pool_group.command("list")
    @output_options
    @filter_option
    @page_options
    def list_pools(json_output: bool, template: str, filter_expr: str, per_page: int,
                   page_token: str) -> None:
        """The node pools."""
        from yurt.runtime.cli.api_client import api
        from yurt.runtime.cli.paging import get_page, next_page_hint, page_params

        with api() as client:
            pools, next_token = get_page(client, "/v1/node/pools",
                                         page_params(filter_expr, per_page, page_token))
        emit(pools, json_output, template,
             lambda: echo("\n".join(filter(None, (format_pool_list(pools),
                                                  next_page_hint(next_token))))))

    @pool_group.command("info")
    @output_options
    @click.argument("name", metavar="POOL")
    def info(json_output: bool, template: str, name: str) -> None:
        """A node pool's details."""
        from yurt.runtime.cli.api_client import api

        with api() as client:
            pool = _find(client, name)
        emit(pool, json_output, template, lambda: echo(format_pool_info(pool)))

    @pool_group.command("delete")
    @click.argument("name", metavar="POOL")
    def delete(name: str) -> None:
        """Delete a node pool (not one with nodes or live jobs, nor a built-in one)."""
        from urllib.parse import quote

        from yurt.runtime.cli.api_client import api, fail_on_error

        with api() as client:
            response = client.request("DELETE", f"/v1/node/pool/{quote(name, safe='')}")
            fail_on_error(response, "Error deleting node pool")
        echo(f'Successfully deleted node pool "{name}"!')

    @pool_group.command("jobs")
    @output_options
    @filter_option
    @page_options
    @click.argument("name", metavar="POOL")
    def jobs(json_output: bool, template: str, filter_expr: str, per_page: int,
             page_token: str, name: str) -> None:
        """The jobs of a node pool."""
        from urllib.parse import quote

        from yurt.runtime.cli.api_client import api, print_jobs
        from yurt.runtime.cli.paging import get_page, next_page_hint, page_params

        with api() as client:
            pool = _find(client, name)
            found, next_token = get_page(
                client, f"/v1/node/pool/{quote(pool['Name'], safe='')}/jobs",
                page_params(filter_expr, per_page, page_token))

        def human() -> None:
            if found:
                print_jobs(found)
            else:
                echo("No jobs")
            if next_token:
                echo(next_page_hint(next_token))

        emit(found, json_output, template, human)

    @pool_group.command("nodes")
    @output_options
    @click.option("-verbose", "--verbose", is_flag=True, help="Full node IDs.")
    @filter_option
    @page_options
    @click.argument("name", metavar="POOL")
    def nodes(json_output: bool, template: str, verbose: bool, filter_expr: str,
              per_page: int, page_token: str, name: str) -> None:
        """The nodes of a node pool."""
        from urllib.parse import quote

        from yurt.runtime.cli.api_client import api
        from yurt.runtime.cli.paging import get_page, next_page_hint, page_params

        with api() as client:
            pool = _find(client, name)
            found, next_token = get_page(
                client, f"/v1/node/pool/{quote(pool['Name'], safe='')}/nodes",
                page_params(filter_expr, per_page, page_token))
        emit(found, json_output, template,
             lambda: echo("\n".join(filter(None, (
                 format_node_stubs(found, verbose) if found else "No nodes",
                 next_page_hint(next_token))))))
