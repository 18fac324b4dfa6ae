"""Device plugins: what devices a node has, their health and stats, and how a task gets one.

- `protocol.py`: the plugin contract and its data (groups of instances, reservations, stats).
- `fake.py`: devices declared in configuration, for tests and demos.
- `nvidia.py`: NVIDIA GPUs through NVML, when the library and a GPU are there.
- `manager.py`: `DeviceManager`, which runs every plugin and survives the ones that fail.
"""
