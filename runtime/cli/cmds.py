"""Registers the daily single-node verbs of Nomad's CLI that live in modules of their own:
`service list|info|delete` and `alloc checks` (service.py), `agent-info` and `version`
(agent_info.py), `monitor` (monitor.py) and `eval delete` (eval_delete.py).

`register(cli)` is called once from runtime/cli/__init__.py, after the `alloc` and `eval`
groups exist (jobs.py makes `eval`), since two of these verbs join those groups. Each module
keeps its heavy imports inside its commands (tests/test_import_weight.py).
"""

from __future__ import annotations

import click

from yurt.runtime.cli import agent_info, eval_delete, monitor, service


def register(cli: click.Group) -> None:
    """Add the verbs above to `yurt`."""
    service.register(cli)
    agent_info.register(cli)
    monitor.register(cli)
    eval_delete.register(cli)
