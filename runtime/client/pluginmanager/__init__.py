"""Plugin managers: the driver manager (`drivers.py`). Device plugins have theirs in
`runtime.devices.manager`."""
