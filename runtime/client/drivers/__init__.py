"""Task drivers: the protocol every driver implements, and the drivers yurt ships.

`TASK_CONFIG` maps each driver name to the msgspec struct its `config {}` block decodes into;
the jobspec validates task configs against it, so a typo in a driver option is reported at
`yurt job validate` time with its file and line, not when the task first starts.
"""

from __future__ import annotations

from typing import Final

import msgspec

from yurt.runtime.client.drivers.configs import MockTaskConfig, RawExecTaskConfig

TASK_CONFIG: Final[dict[str, type[msgspec.Struct]]] = {
    "mock_driver": MockTaskConfig,
    "raw_exec": RawExecTaskConfig,
}
