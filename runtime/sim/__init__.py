"""Simulated nodes and clusters: load for real servers, and a whole cluster under a mock clock.

- `node.py`: `SimNode`, one client node made of the real client code (registration,
  heartbeats, allocation pulls, alloc sync, the client's runner bookkeeping) with simulated
  allocation runners (runtime/client/allocrunner/simulated.py).
- `nodesim.py`: `NodeSimulator`, N `SimNode`s in one process against real servers over one
  shared HTTP client, counting what the servers received (`yurt nodesim`); `NaiveSyncer`, the
  one-call-per-update client it is compared with. `nodesim_profile.py`: its TOML profile.
- `network.py`: `SimNetwork`, the node RPC delivered in process with latency, message loss
  and partitions, answering as runtime/api/noderpc.py does.
- `cluster.py`: `SimCluster`, servers over one in-memory etcd, an observer, `SimNode`s and
  the network, in one Trio run.
- `check.py`: the invariants checked after each step and after settling.
- `scenario.py`: random scenarios from a seed, deterministic (`yurt sim`, runtime/cli/sim.py).
"""
