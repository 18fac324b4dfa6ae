"""Cluster mode: yurt servers over etcd and client-only agents.

etcd holds the only durable cluster state (etcd.py speaks to it); `yurt server` processes are
stateless schedulers and API front ends over it, one of them leading; `yurt agent --servers`
runs allocations for the node it is and talks to the servers over HTTP.

What both sides of that HTTP must agree on lives here.
"""

from typing import Final

#: Carries a node's SecretID on every node RPC call but register (routes.py, remote.py).
NODE_SECRET_HEADER: Final = "X-Yurt-Node-Secret"
#: Nomad's default `heartbeat_grace`: how long past a node's TTL the servers wait before
#: calling it down (the servers' setting; the client only counts late beats by it).
HEARTBEAT_GRACE: Final = 10.0
#: Marks a request a server forwards to a node's agent: the agent answers it, whatever it is
#: about, and never sends it back (routes.py `to_node`, clientmode.py).
FORWARDED_HEADER: Final = "X-Yurt-Forwarded"
