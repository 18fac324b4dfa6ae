"""Plugin managers: the driver manager (`drivers.py`). Device plugins have theirs in
`client/devices/manager.py`."""
