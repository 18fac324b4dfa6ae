"""Running a task as the user its jobspec names (`user = "nobody"`).

Why: a task that asks for a user and silently runs as root is a privilege escalation. The
shim itself stays root (it must create and hold the log FIFOs, join the cgroup and survive the
task), and only the task drops privileges, at the last step before its command: the task's
exec line is prefixed with `setpriv --reuid --regid --init-groups` (util-linux), which changes
ids and execs without forking, so the task's pid and process group stay those the shim
reported. setpriv runs after `setsid` and after the cgroup join, both of which need root.

When the agent cannot switch users (it is not root, the user does not exist, setpriv is
missing), the start is refused with a DriverError that names the reason: the task runner turns
it into a "Driver Failure" task event, never a crash, never a task running as someone else.

`resolve_user` is also what other parts use to give a task's directories to its user.
"""

from __future__ import annotations

import os
import pwd
import shutil
from typing import Final

from yurt.runtime.errors import DriverError

SETPRIV: Final = "setpriv"


class UserError(DriverError):
    """The task's user cannot be used (unknown user, or the agent may not switch to it)."""


def resolve_user(name: str) -> tuple[int, int]:
    """The (uid, gid) of the user `name` (a name, or a numeric uid with a passwd entry).

    Raises:
        UserError: no such user.
    """
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError):
        raise UserError(f'user "{name}" does not exist on this node') from None
    return entry.pw_uid, entry.pw_gid


def owner_of(name: str) -> tuple[int, int] | None:
    """`resolve_user`, or None for an unknown user: the task dir is then left to the agent's
    user, and the driver refuses the start with its own clear message (a Driver Failure, as
    Nomad reports an unknown user)."""
    try:
        return resolve_user(name)
    except UserError:
        return None


def user_env(name: str) -> dict[str, str]:
    """HOME, USER and LOGNAME for the user `name`, as a login would set them."""
    entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    return {"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name}


def switch_prefix(name: str) -> list[str]:
    """Words to put before the task's command so that it runs as the user `name`.

    Raises:
        UserError: the agent cannot switch users (not root, no setpriv, unknown user).
    """
    uid, gid = resolve_user(name)
    if os.geteuid() != 0:
        if uid == os.geteuid():
            return []  # already that user: nothing to switch
        raise UserError(f'cannot run the task as user "{name}": the agent is not running as '
                        "root and cannot switch users")
    setpriv = shutil.which(SETPRIV)
    if setpriv is None:
        raise UserError(f'cannot run the task as user "{name}": {SETPRIV} (util-linux) is '
                        "not installed")
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--init-groups", "--"]
