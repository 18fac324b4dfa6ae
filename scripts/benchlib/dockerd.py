"""A private, real dockerd and the busybox image its users run, built locally: for the docker
driver's tests (tests/docker_support.py) and the peer benchmark's docker row.

One daemon per user (a test session, a benchmark run), started as the README says:
`dockerd --storage-driver=vfs --iptables=false --bridge=none` with its own data root, exec
root, pid file and unix socket under a short temporary directory, so it never touches the
host's docker (if any) and two workers never share state. No registry is reachable here, so
the test image is `docker import`ed from a tarball made on the spot of Debian's static busybox
(`/bin/busybox`, installed by scripts/lib/docker.sh) and its applet links.

A missing dockerd, docker CLI or busybox raises `FileNotFoundError` with the install hint.
`stop_dockerd` removes the containers first, then stops the daemon, bounded.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DOCKERD = os.environ.get("YURT_DOCKERD", "/usr/sbin/dockerd")
BUSYBOX = os.environ.get("YURT_BUSYBOX", "/bin/busybox")
INSTALL_HINT = ("a private dockerd needs Debian's docker.io and busybox-static: apt-get "
                "install docker.io busybox-static (scripts/test installs them as root)")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
#: The busybox applets the test image links (the tests' tasks use only these).
APPLETS = ("sh", "echo", "sleep", "cat", "ls", "id", "env", "true", "false", "kill", "ps",
           "head", "dd", "wc", "grep", "touch", "mkdir", "rm", "trap", "date", "hostname",
           "nc", "seq", "tail", "stat", "printf", "test", "[", "yes", "tr")
IMAGE = "yurt-test/busybox:1"
#: Held while a test bridge's subnet is chosen and its bridge made.
BRIDGE_LOCK = "/tmp/yurt-test-bridges.lock"


@dataclass(frozen=True)
class DockerDaemon:
    """A running test dockerd: where it listens and what it holds."""

    root: Path
    socket: Path
    process: subprocess.Popen[bytes]
    #: The Linux bridge the daemon's `bridge` network uses ("": none, `--bridge=none`).
    bridge: str = ""

    @property
    def host(self) -> str:
        """The daemon's address as DOCKER_HOST and the driver's `endpoint` spell it."""
        return f"unix://{self.socket}"

    def cli(self, *args: str, check: bool = True, timeout: float = 60.0,
            stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this daemon (a real client, for the tests' checks)."""
        done = subprocess.run(["docker", "-H", self.host, *args], capture_output=True,
                              timeout=timeout, check=False, input=stdin,
                              text=stdin is None)
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed: {done.stderr!r}")
        return done  # type: ignore[return-value]

    def containers(self, *filters: str, all_: bool = True) -> list[str]:
        """IDs of the containers matching `filters` (`label=k=v`, `status=running`, …)."""
        args = ["ps", "-q", "--no-trunc"] + (["-a"] if all_ else [])
        for f in filters:
            args += ["--filter", f]
        return self.cli(*args).stdout.split()

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.root / "dockerd.log").read_text(
                errors="replace").splitlines()[-lines:])
        return ""


def busybox_rootfs_tar(applets: tuple[str, ...] = APPLETS) -> bytes:
    """A root filesystem of the static busybox and its applet links, as a tar."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, arcname="bin/busybox")
        for applet in applets:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size, info.mode = len(passwd), 0o644
        tar.addfile(info, io.BytesIO(passwd))
    return data.getvalue()


def import_image(daemon: DockerDaemon, tag: str = IMAGE, *, cmd: list[str] | None = None
                 ) -> str:
    """`docker import` the busybox rootfs as `tag` (with `cmd` as the image's CMD); its ID."""
    changes = ["--change", f"CMD {json.dumps(cmd)}"] if cmd else []
    daemon.cli("import", *changes, "-", tag, stdin=busybox_rootfs_tar())
    return daemon.cli("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()


def _make_bridge(name: str) -> None:
    """A Linux bridge of its own /24 (10.213.N.0/24, the first N no interface uses), up.
    Two daemons starting at once (two test workers) choose under one lock; a bridge left
    half-made by a failed step is deleted."""
    with open(BRIDGE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True,
                              check=True).stdout
        for n in range(1, 255):
            if f" 10.213.{n}." not in used:
                break
        else:
            raise RuntimeError("no free 10.213.N.0/24 for a test bridge")
        try:
            for words in (["link", "add", name, "type", "bridge"],
                          ["addr", "add", f"10.213.{n}.1/24", "dev", name],
                          ["link", "set", name, "up"]):
                subprocess.run(["ip", *words], capture_output=True, text=True, check=True)
        except BaseException:
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
            raise


def start_dockerd(root: Path | None = None, *, bridge: bool = False) -> DockerDaemon:
    """Start a private dockerd and wait until it answers (bounded). With `bridge`, its
    `bridge` network is a Linux bridge made for it (no iptables: published ports go through
    Docker's userland proxy, so they answer on the host's loopback); else it has none."""
    if not (os.access(DOCKERD, os.X_OK) and os.access(BUSYBOX, os.X_OK)
            and shutil.which("docker")):
        raise FileNotFoundError(INSTALL_HINT)
    # A short path: a unix socket's path must fit in 108 bytes, containerd's too.
    root = root or Path(tempfile.mkdtemp(prefix="yd-", dir="/tmp"))
    socket = root / "docker.sock"
    bridge_name = f"yb{root.name[-8:]}".replace("-", "") if bridge else ""
    if bridge_name:
        _make_bridge(bridge_name)
    log = (root / "dockerd.log").open("wb")
    process = subprocess.Popen(
        [DOCKERD, "--storage-driver=vfs", "--iptables=false",
         f"--bridge={bridge_name or 'none'}",
         "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
         "--pidfile", str(root / "dockerd.pid"), "-H", f"unix://{socket}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    daemon = DockerDaemon(root=root, socket=socket, process=process, bridge=bridge_name)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop_dockerd(daemon, remove=False)  # its bridge
            raise RuntimeError(f"dockerd exited with {process.returncode}:\n"
                               f"{daemon.log_tail()}")
        if socket.exists() and daemon.cli("version", check=False, timeout=10).returncode == 0:
            return daemon
        time.sleep(0.1)
    stop_dockerd(daemon)
    raise RuntimeError(f"dockerd did not answer within {START_TIMEOUT:.0f}s:\n"
                       f"{daemon.log_tail()}")


def stop_dockerd(daemon: DockerDaemon, *, remove: bool = True) -> None:
    """Remove its containers, stop the daemon (SIGTERM, then SIGKILL), remove its root."""
    if daemon.process.poll() is None:
        with contextlib.suppress(subprocess.SubprocessError, AssertionError):
            ids = daemon.containers()
            if ids:
                daemon.cli("rm", "-f", *ids, check=False)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.process.pid, signal.SIGTERM)
        try:
            daemon.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.process.pid, signal.SIGKILL)
            daemon.process.wait(STOP_TIMEOUT)
    if daemon.bridge:
        subprocess.run(["ip", "link", "del", daemon.bridge], check=False, capture_output=True)
    if remove:
        # Containers' leftovers may still be mounted (their shm, the netns files).
        subprocess.run(["umount", "-R", "-l", str(daemon.root / "exec")], check=False,
                       capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(daemon.root / "data")], check=False,
                       capture_output=True)
        shutil.rmtree(daemon.root, ignore_errors=True)
