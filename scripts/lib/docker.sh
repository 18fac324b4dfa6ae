# Sourced by scripts/test and scripts/bench_peers: make sure Debian's docker.io (dockerd, the
# docker CLI, containerd, runc) and busybox-static (the one static binary the tests' images are
# made of: no registry is reachable, so images are built locally) are installed. The tests
# start their own dockerd (tests/docker_support.py); nothing here starts or enables a daemon.
# Installs with apt-get when run as root (CI is); otherwise says what to run. Honours
# $YURT_DOCKERD and $YURT_BUSYBOX.
set -euo pipefail

ensure_docker() {
  local dockerd="${YURT_DOCKERD:-/usr/sbin/dockerd}" busybox="${YURT_BUSYBOX:-/bin/busybox}"
  if [ -x "$dockerd" ] && [ -x "$busybox" ]; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian's docker.io and busybox-static (the docker driver's tests run a real dockerd)" >&2
    apt-get update -qq -o DPkg::Lock::Timeout=120 >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=120 \
      --no-install-recommends docker.io busybox-static >&2
  fi
  if [ ! -x "$dockerd" ] || [ ! -x "$busybox" ]; then
    echo "the docker driver's tests need dockerd and a static busybox ($dockerd, $busybox):" >&2
    echo "  apt-get install docker.io busybox-static   (or set YURT_DOCKERD and YURT_BUSYBOX)" >&2
    return 1
  fi
}
