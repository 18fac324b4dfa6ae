"""The server's durable state, two backends side by side.

`sqlite.py` (the embedded server's `server.db`) and `etcd.py` (a cluster's state in etcd) store
jobs, evaluations, allocations, nodes and deployments under one interface; `objects_sqlite.py`
and `objects_etcd.py` do the same for namespaces and variables. The server conformance suite
(tests/test_server_store_conformance.py) runs against both.
"""
