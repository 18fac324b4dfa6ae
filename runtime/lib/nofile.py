"""The open-file limit of a process that supervises tasks: one policy, used by `yurt agent`
(runtime/agent/agent.py `Agent.run`), `yurt run` (runtime/cli/run.py `run`) and `yurt nodesim`
(runtime/sim/nodesim.py `NodeSimulator.run`).

Descriptors bound how many tasks one process can supervise: each running raw_exec task holds
about five (runtime/client/fingerprint.py, `FDS_PER_TASK`), and the soft default, often 1024,
would stop near 180 tasks. So at start the soft `RLIMIT_NOFILE` is lifted to the hard one.

Invariants: the hard limit is never changed and no limit is ever lowered. A hard limit of
`RLIM_INFINITY` is not a soft limit the kernel accepts (setrlimit(2) refuses one above
`/proc/sys/fs/nr_open`), so the target is then that ceiling. When the raise fails the soft
limit stays as it was; the caller gets the limit in force and reports it (the node's
`yurt.nofile` and `yurt.max_tasks`, which `yurt node status` shows).

A leaf: the standard library only, so the CLI, which may not import the client, shares it.
"""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the kernel's ceiling for one process
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            target = soft
    if soft != resource.RLIM_INFINITY and soft < target:
        # On failure the soft limit stays; `yurt.max_tasks` tells the operator what it allows.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
