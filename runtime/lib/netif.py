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
_SYS_NET: Final = Path("/sys/class/net")


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


def interface_address(name: str, family: str = "") -> str:
    """The address a node on interface `name` advertises: in `family` ("ipv4" or "ipv6",
    Nomad's client `preferred_address_family`) when given, else its IPv4 address, else its
    first IPv6 one.

    Raises:
        ValueError: no interface of that name (the message names the ones there are), or it
            has no address (in `family`).
    """
    names = interface_names()
    if name not in names:
        raise ValueError(f"no network interface {name!r} on this machine; its interfaces "
                         f"are {', '.join(names) or 'none'}")
    if family == "ipv4":
        address = _ipv4(name)
    elif family == "ipv6":
        address = _ipv6(name)
    else:
        address = _ipv4(name) or _ipv6(name)
    if address is None:
        kind = {"ipv4": "IPv4 ", "ipv6": "IPv6 "}.get(family, "IP ")
        raise ValueError(f"the network interface {name!r} has no {kind}address")
    return address


def default_route_address(family: str) -> str:
    """This machine's address in `family` ("ipv4" or "ipv6") on its default route: the source
    address of a UDP `connect` (which sends nothing) to a documentation address.

    Raises:
        ValueError: no route in that family.
    """
    inet, target = ((socket.AF_INET6, "2001:db8::1") if family == "ipv6"
                    else (socket.AF_INET, "192.0.2.1"))  # never routed anywhere real
    try:
        with socket.socket(inet, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            address: str = s.getsockname()[0]
    except OSError as e:
        raise ValueError(f"this machine has no {family} default route ({e.strerror or e}); "
                         "give -network-interface") from None
    return address


def interface_of(address: str) -> str | None:
    """The interface that holds `address` (its primary IPv4 address, or one of its IPv6
    addresses), or None."""
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return None
    try:
        lines = _IF_INET6.read_text().splitlines() if wanted.version == 6 else []
    except OSError:
        lines = []
    for fields in (line.split() for line in lines):
        if len(fields) == 6 and ipaddress.IPv6Address(bytes.fromhex(fields[0])) == wanted:
            return fields[5]
    if wanted.version == 4:
        for name in interface_names():
            if _ipv4(name) == address:
                return name
    return None


def link_speed(name: str) -> int:
    """Interface `name`'s link speed in Mbit/s as the kernel reports it, 0 when it does not
    (a virtual interface, loopback: client/fingerprint/network_linux.go `linkSpeedSys`)."""
    try:
        speed = int((_SYS_NET / name / "speed").read_text().strip())
    except (OSError, ValueError):  # EINVAL for interfaces without a link
        return 0
    return max(speed, 0)
