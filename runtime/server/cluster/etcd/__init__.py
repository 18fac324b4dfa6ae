"""etcd: the client that speaks its v3 API (client.py), the key-value seam the cluster state is
written through (kv.py), its in-memory fake for fast tests (memkv.py), and the launcher of a
real etcd process for demos and tests (process.py)."""
