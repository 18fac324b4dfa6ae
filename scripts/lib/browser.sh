# Sourced by scripts/test and scripts/bench_ui: make sure Debian's Chromium and its chromedriver
# are installed (the web UI's tests and benchmark drive them). Installs them with apt-get when
# run as root (CI is); otherwise says what to run. Honours $YURT_CHROMIUM / $YURT_CHROMEDRIVER.
set -euo pipefail

ensure_browser() {
  local chromium="${YURT_CHROMIUM:-/usr/bin/chromium}" driver="${YURT_CHROMEDRIVER:-/usr/bin/chromedriver}"
  if [ -x "$chromium" ] && [ -x "$driver" ]; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian's chromium and chromium-driver (the web UI's tests drive them)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >&2
  fi
  if [ ! -x "$chromium" ] || [ ! -x "$driver" ]; then
    echo "the web UI's tests need Chromium and chromedriver ($chromium, $driver):" >&2
    echo "  apt-get install chromium chromium-driver   (or set YURT_CHROMIUM and YURT_CHROMEDRIVER)" >&2
    return 1
  fi
}
