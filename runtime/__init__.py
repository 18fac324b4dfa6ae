"""yurt: a node agent that runs Nomad-style allocations as Trio nursery trees.

The package is an application, not a library: its three import packages (`runtime`, `hooks`,
`store`) are installed together as the one distribution `yurt`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("yurt")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
