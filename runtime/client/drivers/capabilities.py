"""Linux capability sets for the isolating drivers, as Nomad computes them (pure: no I/O but
`supported`, which reads one /proc file).

Names are normalised as Nomad's drivers/shared/capabilities/set.go `normalize` does: trimmed,
lower-cased, without a `cap_` prefix; `"all"` means every capability the kernel supports (in
an add) or none left (in a drop). `calculate` is set.go's `Calculate` (exec): the basis
(`NOMAD_DEFAULTS`) intersected with the plugin's `allow_caps`, minus `cap_drop`, plus
`cap_add`, where a `cap_add` outside `allow_caps` is refused with Nomad's message.
`delta` is set.go's `Delta` (docker): the `--cap-add`/`--cap-drop` lists relative to Docker's
defaults. `setpriv_options` turns a set into util-linux `setpriv` options (bounding,
inheritable and ambient sets: what executor_linux_cgo.go `configureCapabilities` gives a
non-root task).
Invariants: every set is a frozenset of normalised names; results are sorted.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from yurt.runtime.errors import DriverError

#: include/uapi/linux/capability.h, in number order (index = capability number).
KNOWN: Final = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid",
    "setuid", "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin",
    "net_raw", "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace",
    "sys_pacct", "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time",
    "sys_tty_config", "mknod", "lease", "audit_write", "audit_control", "setfcap",
    "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read",
    "perfmon", "bpf", "checkpoint_restore",
)
#: drivers/shared/capabilities/defaults.go `HCLSpecLiteral` / `NomadDefaults`: Docker's
#: default set without NET_RAW; also the exec plugin's default `allow_caps`.
NOMAD_DEFAULTS: Final = frozenset((
    "audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
    "net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"))
#: defaults_default.go `DockerDefaults`: Nomad's defaults plus NET_RAW.
DOCKER_DEFAULTS: Final = NOMAD_DEFAULTS | {"net_raw"}
CAP_LAST_CAP: Final = Path("/proc/sys/kernel/cap_last_cap")


def normalize(name: str) -> str:
    """set.go `normalize`: " CAP_Chown " → "chown"."""
    return name.strip().lower().removeprefix("cap_")


def supported(last_cap: int | None = None) -> frozenset[str]:
    """The capabilities this kernel supports (set.go `Supported`): those numbered up to
    /proc/sys/kernel/cap_last_cap (every known one if it cannot be read)."""
    if last_cap is None:
        try:
            last_cap = int(CAP_LAST_CAP.read_text())
        except (OSError, ValueError):
            last_cap = len(KNOWN) - 1
    return frozenset(KNOWN[:last_cap + 1])


def new(names: Iterable[str], system: frozenset[str]) -> frozenset[str]:
    """set.go `New`: the normalised names, `all` expanded to the `system` set."""
    found: set[str] = set()
    for name in map(normalize, names):
        if name == "all":
            found |= system
        elif name:
            found.add(name)
    return frozenset(found)


def text(caps: Iterable[str]) -> str:
    """set.go `String`: sorted, comma-separated, normalised."""
    return ", ".join(sorted(caps))


def unsupported(names: Iterable[str], system: frozenset[str]) -> frozenset[str]:
    """The names among `names` that the kernel does not know (set.go `Difference`)."""
    return new(names, system) - system


def calculate(allow_caps: Iterable[str], cap_add: Iterable[str], cap_drop: Iterable[str],
              system: frozenset[str], basis: frozenset[str] = NOMAD_DEFAULTS
              ) -> frozenset[str]:
    """set.go `Calculate`: the task's capability set.

    Raises:
        DriverError: (not recoverable) `cap_add` asks for a capability outside `allow_caps`.
    """
    allow, adds = new(allow_caps, system), new(cap_add, system)
    missing = adds - allow
    if missing:
        raise DriverError(
            f"driver does not allow the following capabilities: {text(missing)}")
    result = basis & allow
    drops = [normalize(name) for name in cap_drop]
    result = frozenset() if "all" in drops else result - set(drops)
    return result | adds


def delta(allow_caps: Iterable[str], cap_add: Iterable[str], cap_drop: Iterable[str],
          system: frozenset[str], basis: frozenset[str] = DOCKER_DEFAULTS
          ) -> tuple[list[str], list[str]]:
    """set.go `Delta`: the (add, drop) lists for a container whose runtime starts from
    `basis`: the task's adds (["all"] if it says so), and its drops plus what the basis has
    beyond `allow_caps` (["all"] if it says so); sorted, lower case, no `cap_` prefix.

    Raises:
        DriverError: (not recoverable) `cap_add` asks for a capability outside `allow_caps`.
    """
    cap_add, cap_drop = list(cap_add), list(cap_drop)
    allow = new(allow_caps, system)
    missing = new(cap_add, system) - allow
    if missing:
        raise DriverError(
            f"driver does not allow the following capabilities: {text(missing)}")
    add = ["all"] if "all" in map(normalize, cap_add) else sorted(new(cap_add, system))
    drop = (["all"] if "all" in map(normalize, cap_drop)
            else sorted((basis - allow) | new(cap_drop, system)))
    return add, drop


def setpriv_options(caps: Iterable[str], *, ambient: bool) -> list[str]:
    """util-linux `setpriv` options that leave exactly `caps` in the bounding set (and, with
    `ambient`, in the inheritable and ambient sets, so that a task switched to a non-root
    user keeps them across its execve; a root task gets them back from the bounding set)."""
    wanted = "".join(f",+{name}" for name in sorted(caps))
    options = [f"--bounding-set=-all{wanted}", f"--inh-caps=-all{wanted if ambient else ''}"]
    if ambient:
        options.append(f"--ambient-caps=-all{wanted}")
    return options


def mask(caps: Iterable[str]) -> int:
    """The capability bitmask of `caps` (as /proc/PID/status prints `CapBnd`, in hex)."""
    return sum(1 << KNOWN.index(name) for name in caps)
