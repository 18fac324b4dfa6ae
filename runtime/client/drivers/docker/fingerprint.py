"""One fingerprint of the docker daemon: Nomad's drivers/docker/fingerprint.go `buildFingerprint`.

Healthy, with `driver.docker`, `driver.docker.version`, `driver.docker.os_type`,
`driver.docker.runtimes` and the plugin's `privileged.enabled` / `volumes.enabled` /
`pids.limit`, while the daemon answers `/version` and `/info`. A daemon that does not answer
is "Failed to connect to docker daemon": undetected until it has once been seen, unhealthy
after (so the node keeps the driver, and its running containers, while the daemon is away).

The probe also finds the network a container gets when its config names none: Docker's
`bridge` where the daemon has it; `none` on a daemon started with `--bridge=none`, where
asking for the default network would fail every start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from yurt.runtime.client.drivers.docker.engine import DockerEngine, DockerError
from yurt.runtime.client.drivers.docker.plugin import DockerPluginConfig
from yurt.runtime.client.drivers.protocol import Fingerprint

UNREACHABLE: Final = "Failed to connect to docker daemon"


@dataclass(frozen=True)
class Probe:
    fingerprint: Fingerprint
    #: The network of a container whose config names none ("" when the daemon is away).
    default_network: str = ""


async def probe(engine: DockerEngine, config: DockerPluginConfig, *,
                seen_before: bool) -> Probe:
    """Ask the daemon once; never raises for a daemon that cannot be reached or answers
    with an error (that is the fingerprint's content)."""
    try:
        version = await engine.request("GET", "/version", versioned=False)
        info = await engine.request("GET", "/info")
        networks = await engine.request("GET", "/networks")
    except DockerError:
        return Probe(Fingerprint("unhealthy" if seen_before else "undetected", UNREACHABLE))
    attributes = {"driver.docker": "1", "driver.docker.version": str(version.get("Version", "")),
                  "driver.docker.os_type": str(info.get("OSType", "")),
                  "driver.docker.runtimes": ",".join(sorted(info.get("Runtimes") or {}))}
    if config.allow_privileged:
        attributes["driver.docker.privileged.enabled"] = "1"
    if config.volumes.enabled:
        attributes["driver.docker.volumes.enabled"] = "1"
    if config.pids_limit:
        attributes["driver.docker.pids.limit"] = str(config.pids_limit)
    names = {str(n.get("Name")) for n in networks or []}
    if "bridge" in names:
        for network in networks:
            if network.get("Name") == "bridge":
                gateways = [c.get("Gateway") for c in
                            (network.get("IPAM") or {}).get("Config") or []]
                if gateways and gateways[0]:
                    attributes["driver.docker.bridge_ip"] = str(gateways[0])
    if info.get("OSType") not in (None, "", "linux"):
        return Probe(Fingerprint("unhealthy", f"Docker runs {info.get('OSType')} containers; "
                                 "this agent runs Linux ones", attributes))
    return Probe(Fingerprint("healthy", "Healthy", attributes),
                 default_network="bridge" if "bridge" in names else "none")
