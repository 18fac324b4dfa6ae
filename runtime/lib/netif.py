"""This machine's network interfaces by name, and the address an interface gives a node.

Nomad's client `network_interface` (client/fingerprint/network.go `Fingerprint`) names the
interface whose first address becomes the node's `unique.network.ip-address`: the address
task ports are bound on and services, checks and templates are given. `-dev` uses the
loopback interface (command/agent/config.go `networkConfig`: "lo"). Without a name, the
default route's interface is used (runtime/client/fingerprint.py).

Linux only, standard library only (lib imports nothing above it): names come from
`if_nameindex`; an interface's IPv4 address from the `SIOCGIFADDR` ioctl (its primary
address, the one Go lists first), else its first IPv6 address that is not link-local from
/proc/net/if_inet6, as Nomad keeps link-local addresses only when nothing else is there.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from pathlib import Path
from typing import Final

#: linux/sockios.h: get an interface's (primary) IPv4 address.
SIOCGIFADDR: Final = 0x8915
_IF_INET6: Final = Path("/proc/net/if_inet6")


def interface_names() -> list[str]:
    """This machine's interfaces, in the kernel's index order."""
    return [name for _, name in socket.if_nameindex()]


def _ipv4(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            answer = fcntl.ioctl(s.fileno(), SIOCGIFADDR,
                                 struct.pack("256s", name.encode()[:15]))
        except OSError:  # EADDRNOTAVAIL: no IPv4 address; ENODEV: no such interface
            return None
    return socket.inet_ntoa(answer[20:24])


def _ipv6(name: str) -> str | None:
    try:
        lines = _IF_INET6.read_text().splitlines()
    except OSError:
        return None
    found = [ipaddress.IPv6Address(bytes.fromhex(fields[0]))
             for fields in (line.split() for line in lines)
             if len(fields) == 6 and fields[5] == name]
    usable = [a for a in found if not a.is_link_local] or found
    return str(usable[0]) if usable else None


def interface_address(name: str) -> str:
    """The address a node on interface `name` advertises: its IPv4 address, else its first
    IPv6 one.

    Raises:
        ValueError: no interface of that name (the message names the ones there are), or it
            has no address.
    """
    names = interface_names()
    if name not in names:
        raise ValueError(f"no network interface {name!r} on this machine; its interfaces "
                         f"are {', '.join(names) or 'none'}")
    address = _ipv4(name) or _ipv6(name)
    if address is None:
        raise ValueError(f"the network interface {name!r} has no IP address")
    return address
