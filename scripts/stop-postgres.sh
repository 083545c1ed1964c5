#!/usr/bin/env bash
# Stop the PostgreSQL server that scripts/start-postgres.sh started in DIR (pg_ctl stop, by its pid file; fast
# shutdown: open sessions are ended). A directory with no running server is not an error.
# Usage: scripts/stop-postgres.sh DIR
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
D=$1
[ -f "$D/postmaster.pid" ] || exit 0
BIN=${PG_BIN:-}
if [ -z "$BIN" ]; then
  if command -v pg_ctl >/dev/null 2>&1; then
    BIN=$(dirname "$(command -v pg_ctl)")
  else
    BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  fi
fi
if [ "$(id -u)" = 0 ]; then
  runuser -u postgres -- "$BIN/pg_ctl" -D "$D" -m fast -w -t 60 stop >/dev/null
else
  "$BIN/pg_ctl" -D "$D" -m fast -w -t 60 stop >/dev/null
fi
