# Sourced by scripts/*: make sure ./.venv exists and has yurt installed (editable) with the
# extras named in $YURT_EXTRAS. Reinstalls only when pyproject.toml changed since the last
# install (setup.py and the package list included), so repeated runs cost nothing. Needs only a Python 3.11+ on PATH.
set -euo pipefail

find_python() {
  for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  echo "yurt needs Python 3.11 or newer on PATH (or set PYTHON=/path/to/python3.11)" >&2
  return 1
}

ensure_venv() {
  # One stamp per extra set; installing [test] also satisfies the plain install, so scripts
  # that need less never undo what ./scripts/test installed.
  local extras="${YURT_EXTRAS:-}" spec="." hash
  [ -n "$extras" ] && spec=".[$extras]"
  if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv" >&2
    "$(find_python)" -m venv .venv
  fi
  hash="$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)"
  if [ "$(cat ".venv/.yurt-stamp-${extras:-base}" 2>/dev/null)" != "$hash" ]; then
    echo "==> installing yurt${extras:+ with [$extras]} into .venv" >&2
    # pip relays the build backend's notices even with --quiet (setuptools' ten-line
    # "Editable installation" note, for one): they go to a log shown only when pip fails.
    local log=.venv/.yurt-install.log
    if ! { .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip &&
           .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec"; } >"$log" 2>&1
    then
      cat "$log" >&2
      echo "installing yurt into .venv failed (the output above is in $log)" >&2
      return 1
    fi
    echo "$hash" > ".venv/.yurt-stamp-${extras:-base}"
    echo "$hash" > .venv/.yurt-stamp-base
  fi
  # mypy cannot follow the editable install's import hook, so it reads the same files through a
  # link tree shaped like the installed namespace (yurt/runtime -> ../../../runtime, …).
  local top
  mkdir -p .venv/typecheck/yurt
  for top in runtime hooks store; do
    ln -sfn "../../../$top" ".venv/typecheck/yurt/$top"
  done
}
