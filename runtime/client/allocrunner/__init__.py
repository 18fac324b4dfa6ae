"""The allocation runner: one allocation as one nursery tree (Nomad's `allocrunner`).

- `lifecycle.py`: the lifecycle coordinator, pure (which stages may start now).
- `status.py`: client-status rules, pure (task states → allocation status).
- `broadcaster.py`: newest-value fan-out of the allocation's client state.
- `runner.py`: `AllocRunner`, which owns the task runners and kills them in order.
"""
