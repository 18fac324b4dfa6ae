"""Cluster mode: what a `yurt server` among several and a `yurt agent --servers` need beyond the
embedded single-node server (etcd access, node liveness, leader election, the node RPC).
"""
