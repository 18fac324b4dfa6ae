"""Cluster mode: yurt servers over etcd and client-only agents.

etcd holds the only durable cluster state (etcd.py speaks to it); `yurt server` processes are
stateless schedulers and API front ends over it, one of them leading; `yurt agent --servers`
runs allocations for the node it is and talks to the servers over HTTP.
"""
