"""The scheduler: pure functions from a snapshot of state to a plan (Nomad's `scheduler/`).

No trio, no I/O, no clock (the time is a parameter): tests/test_layers.py holds that. The
server loops (`server/local.py`, `server/cluster/server.py`) read a snapshot, call `schedule`
and commit the plan it returns.
"""
