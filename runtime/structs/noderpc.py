"""The node RPC's wire contract: what a client agent and the cluster's servers must agree on.

Cluster mode runs `yurt server` processes over etcd (runtime/server/cluster/) and client-only
agents that talk to them over HTTP (runtime/client/remote.py, runtime/agent/clientmode.py).
Both sides import these names from here, so the client never imports the server.
"""

from typing import Final

#: Carries a node's SecretID on every node RPC call but register (api/noderpc.py,
#: client/remote.py).
NODE_SECRET_HEADER: Final = "X-Yurt-Node-Secret"
#: Nomad's default `heartbeat_grace`: how long past a node's TTL the servers wait before
#: calling it down (the servers' setting; the client only counts late beats by it).
HEARTBEAT_GRACE: Final = 10.0
#: Marks a request a server forwards to a node's agent: the agent answers it, whatever it is
#: about, and never sends it back (api/noderpc.py `to_node`, agent/clientmode.py).
FORWARDED_HEADER: Final = "X-Yurt-Forwarded"
