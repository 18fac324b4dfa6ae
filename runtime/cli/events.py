"""`yurt events`: follow the agent's event stream (the work is api_client.py `events`).

Loaded only when it runs (runtime/cli/lazy.py).
"""

from __future__ import annotations

import click


@click.command("events")
@click.option("--topic", "topics", multiple=True,
              help="Topic filter such as Allocation, Task or Job:web (repeatable).")
@click.option("--index", type=int, default=None,
              help="First replay the kept events from this index on (0: all kept); "
                   "without it, only new events.")
@click.option("--json", "json_output", is_flag=True,
              help="Print the API's JSON instead of tables.")
def events_command(topics: tuple[str, ...], index: int | None, json_output: bool) -> None:
    """Follow the agent's event stream (websocket) until Ctrl-C."""
    from yurt.runtime.cli import api_client

    api_client.events(list(topics), index, json_output)


def register(root: click.Group) -> None:
    root.add_command(events_command)
