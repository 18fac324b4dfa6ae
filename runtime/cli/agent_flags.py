"""Nomad's `agent` flags that yurt's own options lacked (command/agent/command.go `readConfig`),
as one decorator on `yurt agent`: `nomad_agent_options` adds them, and their values reach
`AgentOptions` (runtime/cli/agent.py) under the same names, where `build_config` gives them
the meaning Nomad's have over the config file:

- `-region`: yurt has one region, `global`; any other is refused (exit 2).
- `-state-dir`, `-alloc-dir`: the client's state and the allocation directories, instead of
  the data dir's `client/` and `alloc/` (Nomad's `client.state_dir`/`client.alloc_dir`).
- `-host-volumes-dir`, `-host-volume-plugin-dir`: where the `mkdir` plugin makes dynamic
  host volumes and where the external plugins are, instead of the data dir's `host_volumes/`
  and `host_volume_plugins/` (Nomad's `client.host_volumes_dir`, `host_volume_plugin_dir`).
- `-node-class`, `-node-pool`: the node's class (`${node.class}`) and pool, over the file's.
- `-network-interface`, `-preferred-address-family` (ipv4|ipv6): which interface, and which
  of its addresses, the node advertises (runtime/lib/netif.py); `-network-speed` the link
  speed it reports (`NodeResources.Networks[].MBits`, client/fingerprint.py).
- `-acl-enabled[=BOOL]`: the `[acl] enabled` setting (`=false` turns ACLs off).
- `-log-include-location[=BOOL]`: each log line names its caller (runtime/lib/logformat.py).

Refused with a message (exit 2; scripts/cli_compat_notes.json says why): `-plugin-dir` (yurt
loads no external task driver plugins), `-client-intro-token` (no client introduction; and a
secret never belongs on a command line). Invariant: a flag either does what Nomad's does or is
refused; none is accepted and ignored. Only click here: the module loads with the command
table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: The address families `-preferred-address-family` takes (client/config `PreferredAddressFamily`).
ADDRESS_FAMILIES: Final = ("ipv4", "ipv6")


def _refused(flag: str, why: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def check(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value:
            raise click.UsageError(f"-{flag} is not supported: {why}", ctx)
    return check


#: (flag, why) of the refused flags.
REFUSED: Final = (
    ("plugin-dir", "yurt loads no external plugins: its drivers are Python entry points"),
    ("client-intro-token", "yurt has no client introduction (a client of servers is "
     "admitted with --token-file)"),
)


def nomad_agent_options(f: F) -> F:
    """Add the flags of the module's list to `yurt agent`; the command takes them as
    keyword arguments named as `AgentOptions`' fields."""
    options = [
        click.option("--region", default=None, metavar="REGION",
                     help='The region: yurt has one, "global" (any other is refused).'),
        click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                     default=None, help="The client's state (default DATA_DIR/client)."),
        click.option("--alloc-dir", type=click.Path(file_okay=False, path_type=Path),
                     default=None,
                     help="The allocations' directories (default DATA_DIR/alloc)."),
        click.option("--host-volumes-dir", type=click.Path(file_okay=False, path_type=Path),
                     default=None,
                     help="Where the mkdir plugin makes dynamic host volumes (default "
                          "DATA_DIR/host_volumes)."),
        click.option("--host-volume-plugin-dir",
                     type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="External dynamic host volume plugins (default "
                          "DATA_DIR/host_volume_plugins)."),
        click.option("--node-class", default=None, metavar="CLASS",
                     help="This node's class, for constraints on ${node.class}."),
        click.option("--node-pool", default=None, metavar="POOL",
                     help='The node pool this node registers in (default "default").'),
        click.option("--network-interface", default=None, metavar="NAME",
                     help="The interface whose address the node advertises."),
        click.option("--preferred-address-family", default=None,
                     type=click.Choice(ADDRESS_FAMILIES),
                     help="The address family the node's address is taken in."),
        click.option("--network-speed", type=click.IntRange(min=0), default=None,
                     metavar="MBITS",
                     help="The link speed the node reports, in Mbit/s (default: the "
                          "kernel's, else 1000)."),
        click.option("--acl-enabled", "acl_enabled", default=None, is_flag=False,
                     flag_value=True, type=click.BOOL, metavar="[=BOOL]",
                     help="ACLs on or (=false) off: the config's [acl] enabled."),
        click.option("--log-include-location", "log_include_location", default=None,
                     is_flag=False, flag_value=True, type=click.BOOL, metavar="[=BOOL]",
                     help="Add the caller's file and line to each log line."),
    ]
    for flag, why in REFUSED:
        options.append(click.option(f"--{flag}", default=None, expose_value=False,
                                    metavar="VALUE", callback=_refused(flag, why),
                                    help=f"Refused: {why}."))
    for option in reversed(options):
        f = option(f)
    return f


__all__ = ("ADDRESS_FAMILIES", "REFUSED", "nomad_agent_options")
