"""The node agent's client: everything that runs allocations on this machine.

Nomad's `client/`. `Client` (client.py) keeps one `AllocRunner` per allocation the server gave
this node; `AllocSyncer` (allocsync.py) sends their state back; `restore.py` re-attaches to the
tasks a previous agent left running; `gc.py` removes what finished. Below them, each in its own
package: `allocrunner/` (lifecycle stages, health, teardown; its hooks are built in
`allocrunner/builtin_hooks.py`), `taskrunner/` (one task: restarts, kills, events),
`drivers/` (mock and raw_exec behind one protocol), `devices/`, `pluginmanager/`, `logs/`
(rotation, spill, reading), `checks/`, `getter/` (artifacts) and `templating/`.

Invariant (tests/test_layers.py): the client never imports the server, the API, the agent or
the CLI. It reaches a server through the `Server` protocol it is given, embedded
(`server/local.py`) or remote over the node RPC (`remote.py`).
"""
