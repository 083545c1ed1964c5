#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install gpufleet into it.
#
# Usage: scripts/bootstrap.sh          what running needs: the runtime dependencies (scripts/up)
#        scripts/bootstrap.sh dev      also every extra and the test and development tools (scripts/test)
#
# Each level is installed once and again only when pyproject.toml changes; a dev install covers the runtime one.
set -euo pipefail
cd "$(dirname "$0")/.."
level=${1:-run}
case "$level" in
  run) spec='.' ;;
  dev) spec='.[dev]' ;;
  *) echo "usage: scripts/bootstrap.sh [dev]  (got '$level')" >&2; exit 2 ;;
esac
fresh() {  # an install of this level newer than pyproject.toml
  [ -f "$1" ] && [ ! pyproject.toml -nt "$1" ]
}
if [ -x .venv/bin/python ] && { fresh .venv/.gpufleet-installed-dev || { [ "$level" = run ] && fresh .venv/.gpufleet-installed; }; }; then
  exit 0
fi
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      PY=$candidate; break
    fi
  done
fi
if [ -z "$PY" ]; then
  echo "gpufleet needs Python 3.11 or newer; install it (e.g. apt-get install python3) and retry" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# An editable install of a pyproject.toml project needs pip >= 21.3; a venv's own pip is upgraded only when older.
if ! .venv/bin/python -c 'import sys; from pip import __version__ as v; sys.exit(tuple(map(int, v.split(".")[:2])) < (21, 3))'; then
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
if [ "$level" = run ]; then
  echo "installing gpufleet and what it needs to run into .venv (scripts/test adds the test tools)" >&2
else
  echo "installing gpufleet with every extra and the test and development tools into .venv" >&2
fi
.venv/bin/python -m pip install --quiet -e "$spec"
touch .venv/.gpufleet-installed
if [ "$level" = dev ]; then
  touch .venv/.gpufleet-installed-dev
fi
