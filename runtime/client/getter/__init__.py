"""Artifact downloads in go-getter's syntax, as Nomad's client runs them for `artifact` blocks.

`source.py` parses (pure), `fetch.py` brings bytes over HTTP(S) or from a local file,
`unpack.py` unpacks archives safely, `access.py` judges a `file://` source against the task's
user, `place.py` moves a finished download to its destination through directory descriptors,
`get.py` runs one download end to end, `config.py` holds the client's limits. The task hook
that drives them is `yurt.hooks.artifact`.

Nothing is imported here: the agent reads `config.py` before its API listens, and should not
pay then for the archive modules the downloads need.
"""
