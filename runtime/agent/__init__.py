"""The composition roots: what `yurt agent`, `yurt server`, `yurt run` and client mode wire
together.

Nomad's `command/agent`. Each root builds the parts of the other rooms (a server from
`server/`, a client from `client/`, the API from `api/`, which sees the root through its
`AgentView` protocol) and owns the nursery they run in:

    agent.py           `Agent`: the embedded server, the client, the API, gc, devices
    serverproc.py      `ServerProcess`: `yurt server`, a cluster's server and its API
    config.py          the agent's TOML config file and its checks
    log.py             the agent's structured log (one line per event, fields from lib/logfields)
    heap.py            freezing the long-lived heap after start-up (gc pauses stay short)
    foreground.py      `yurt run`: an embedded agent in the foreground, live events, exit codes
    foreground_logs.py `yurt run`'s task output, followed from the rotated log files
    clientmode.py      client mode (`--servers`): what the embedded server answered, forwarded
    proxy.py           the forwarding of server routes to a cluster server
    templatedata.py    what templates read of the agent (services, variables, node)

Invariant: nothing below this room imports it (tests/test_layers.py); only `cli/agent.py`,
`cli/server.py`, `cli/run.py` and `cli/nodesim.py` of the CLI do, and only inside the command
that needs it, so a plain CLI call never loads the agent.
"""
