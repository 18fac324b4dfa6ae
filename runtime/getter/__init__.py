"""Artifact downloads in go-getter's syntax, as Nomad's client runs them for `artifact` blocks.

`source.py` parses (pure), `fetch.py` brings bytes over HTTP(S) or from a local file,
`unpack.py` unpacks archives safely, `get.py` runs one download end to end, `config.py` holds
the client's limits. The task hook that drives them is `yurt.hooks.artifact`.
"""

from yurt.runtime.getter.config import ArtifactConfig, ArtifactSettings
from yurt.runtime.getter.get import ArtifactRequest, get
from yurt.runtime.getter.source import GetterError

__all__ = ["ArtifactConfig", "ArtifactRequest", "ArtifactSettings", "GetterError", "get"]
