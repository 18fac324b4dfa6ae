"""Cluster mode, the server side: `yurt server` processes over etcd.

etcd holds the only durable cluster state (`etcd/` speaks to it, or to its in-memory fake);
`yurt server` processes are stateless schedulers and API front ends over it, one of them leading
(`leader.py`), each answering the node RPC of client agents (`server.py`, served over HTTP by
`api/noderpc.py`) and watching their heartbeats (`heartbeat.py`). The process that wires them
together is `agent/serverproc.py`. The client side of cluster mode is `client/remote.py` and
`agent/clientmode.py`; what both sides of the node RPC must agree on is `structs/noderpc.py`.
"""
