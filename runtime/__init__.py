"""yurt: a node agent that runs Nomad-style allocations as Trio nursery trees.

The package is an application, not a library: its three import packages (`runtime`, `hooks`,
`store`) are installed together as the one distribution `yurt`.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """`__version__`, read from the installed metadata on first use: importlib.metadata costs
    about 17 ms, and most commands (`yurt --help`, the client verbs) never ask."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("yurt")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
