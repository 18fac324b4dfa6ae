"""The operator's way to bootstrap ACLs again: `acl-bootstrap-reset` in the server's data
directory (`<data-dir>/server` for `yurt agent`, the `--data-dir` of `yurt server`), holding
the index of the last bootstrap, which the refusal of a second bootstrap names
(nomad/acl_endpoint.go `Bootstrap`, `fileBootstrapResetIndex`).

Read at each bootstrap, never cached: the operator writes it while the server runs. Once the
bootstrap it allowed is done, its index no longer matches and it allows nothing more.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Final

#: nomad/acl_endpoint.go `aclBootstrapReset`.
BOOTSTRAP_RESET_FILE: Final = "acl-bootstrap-reset"
#: Go's `Sscanf("%d")` into a uint64: leading space skipped, digits up to the first other
#: character.
_INDEX: Final = re.compile(r"\s*\+?([0-9]{1,20})")
log = logging.getLogger("yurt.server.acl")


def read_bootstrap_reset(directory: Path) -> int:
    """The index in `<directory>/acl-bootstrap-reset`; 0 when there is no such file or it
    holds no number. Blocking: call it in a worker thread."""
    path = directory / BOOTSTRAP_RESET_FILE
    try:
        with path.open("rb") as f:
            raw = f.read(64).decode("ascii", "replace")
    except FileNotFoundError:
        return 0
    except OSError as e:
        log.error("failed to read bootstrap file %s: %s", path, e.strerror)
        return 0
    match = _INDEX.match(raw)
    if match is None or int(match.group(1)) >= 1 << 64:
        log.error("failed to parse bootstrap file %s", path)
        return 0
    index = int(match.group(1))
    log.warning("bootstrap file parsed: %s, reset index %d", path, index)
    return index
