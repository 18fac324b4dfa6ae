"""docker's plugin options (`[drivers.config.docker]` in the agent config), as Nomad's.

The names, nesting and defaults are drivers/docker/config.go `configSpec`'s: `endpoint`,
`allow_privileged`, `allow_caps` (Nomad's default list: Docker's defaults without NET_RAW,
capabilities.py `NOMAD_DEFAULTS`; names the kernel does not know refused),
`volumes { enabled }`, `gc { image, image_delay, container }`, `pull_activity_timeout`,
`extra_labels`, … Options that only matter to features yurt does not have (`infra_image`:
no bridge networking through a pause container; `auth { helper }`: no credential helpers;
`tls`) are accepted, so an agent config written for Nomad loads, and documented as ignored
where they are.

Invariant: `plugin_config` either returns a checked config or raises `DriverError` naming the
option; durations are checked to parse here, not at the first use.
"""

from __future__ import annotations

from typing import Any

import msgspec

from yurt.runtime.client.drivers import capabilities
from yurt.runtime.errors import DriverError
from yurt.runtime.lib.durations import parse_duration


class GCConfig(msgspec.Struct, forbid_unknown_fields=True):
    image: bool = True
    image_delay: str = "3m"
    container: bool = True
    #: Accepted (Nomad's dangling-container reaper); yurt's `reconcile` does that job.
    dangling_containers: dict[str, Any] = msgspec.field(default_factory=dict)


class VolumesConfig(msgspec.Struct, forbid_unknown_fields=True):
    enabled: bool = False
    selinuxlabel: str = ""


class LoggingConfig(msgspec.Struct, forbid_unknown_fields=True):
    type: str = "json-file"
    config: dict[str, str] = msgspec.field(default_factory=dict)


class AuthConfig(msgspec.Struct, forbid_unknown_fields=True):
    """Accepted; yurt has no credential helpers, so a task's own `auth` is the only one."""

    config: str = ""
    helper: str = ""


class DockerPluginConfig(msgspec.Struct, forbid_unknown_fields=True):
    """drivers/docker/config.go `DriverConfig`, as far as yurt uses it."""

    enabled: bool = True
    endpoint: str = ""
    auth: AuthConfig | None = None
    tls: dict[str, str] = msgspec.field(default_factory=dict)
    extra_labels: list[str] = msgspec.field(default_factory=list)
    logging: LoggingConfig = msgspec.field(default_factory=LoggingConfig)
    gc: GCConfig = msgspec.field(default_factory=GCConfig)
    volumes: VolumesConfig = msgspec.field(default_factory=VolumesConfig)
    allow_privileged: bool = False
    allow_caps: list[str] = msgspec.field(
        default_factory=lambda: sorted(capabilities.NOMAD_DEFAULTS))
    nvidia_runtime: str = "nvidia"
    allow_runtimes: list[str] = msgspec.field(default_factory=lambda: ["runc", "nvidia"])
    infra_image: str = ""
    infra_image_pull_timeout: str = "5m"
    image_pull_timeout: str = "5m"
    container_exists_attempts: int = 5
    oom_score_adj: int = 0
    pull_activity_timeout: str = "2m"
    pids_limit: int = 0
    disable_log_collection: bool = False
    allowed_modes: dict[str, list[str]] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in (("gc.image_delay", self.gc.image_delay),
                            ("image_pull_timeout", self.image_pull_timeout),
                            ("infra_image_pull_timeout", self.infra_image_pull_timeout),
                            ("pull_activity_timeout", self.pull_activity_timeout)):
            if value:
                try:
                    parse_duration(value)
                except ValueError as e:
                    raise ValueError(f"{name}: {e}") from None
        if self.pids_limit < 0:
            raise ValueError(f"pids_limit must not be negative, got {self.pids_limit}")

    def seconds(self, value: str) -> float:
        """A duration option of this config in seconds (0 when empty)."""
        return parse_duration(value) / 1e9 if value else 0.0


def plugin_config(config: dict[str, Any]) -> DockerPluginConfig:
    """The docker options in `config`, checked.

    Raises:
        DriverError: an unknown option, a wrong type or a bad duration, named.
    """
    try:
        options = msgspec.convert(config, DockerPluginConfig)
    except (msgspec.ValidationError, ValueError) as e:
        raise DriverError(f"invalid docker plugin config: {e}") from None
    bad = capabilities.unsupported(options.allow_caps, capabilities.supported())
    if bad:  # as drivers/exec/driver.go `Config.validate` (execdriver.py `plugin`)
        raise DriverError("invalid docker plugin config: allow_caps configured with "
                          f"capabilities not supported by system: {capabilities.text(bad)}")
    return options
