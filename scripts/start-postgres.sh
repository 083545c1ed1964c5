#!/usr/bin/env bash
# Start a throwaway PostgreSQL server (for tests and trying `gpufleet server` on PostgreSQL): initdb into DIR when it
# is empty, trust authentication on 127.0.0.1 and on a unix socket in DIR, started with pg_ctl (its pid file is
# DIR/postmaster.pid, its log DIR/server.log). Durability is traded for speed (fsync off): never keep real state in
# it. Idempotent: a server already running in DIR is left alone. Installs nothing (scripts/install-components.sh
# postgresql does). PostgreSQL refuses to run as root, so as root it runs as the `postgres` user.
#
# Usage: scripts/start-postgres.sh DIR [PORT]      (PORT default 55432)
#   Env: PG_BIN (the directory with initdb and pg_ctl; default: from PATH, else the newest /usr/lib/postgresql/*/bin)
# Prints the server's URL, e.g. postgresql://postgres@127.0.0.1:55432/postgres
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 DIR [PORT]" >&2; exit 2; }
D=$1
PORT=${2:-55432}

BIN=${PG_BIN:-}
if [ -z "$BIN" ]; then
  if command -v pg_ctl >/dev/null 2>&1; then
    BIN=$(dirname "$(command -v pg_ctl)")
  else
    BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  fi
fi
for tool in initdb pg_ctl postgres; do
  [ -x "$BIN/$tool" ] || { echo "start-postgres: $tool not found (PG_BIN=$BIN); run scripts/install-components.sh postgresql" >&2; exit 1; }
done

mkdir -p "$D" && D=$(cd "$D" >/dev/null && pwd)
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || { echo "start-postgres: running as root needs a 'postgres' user to run the server as" >&2; exit 1; }
  chown postgres: "$D"
  as_owner() { runuser -u postgres -- "$@"; }
else
  as_owner() { "$@"; }
fi
chmod 0700 "$D"
as_owner test -w "$D" || { echo "start-postgres: the server's user cannot write $D (is a parent directory private?)" >&2; exit 1; }

if [ ! -s "$D/PG_VERSION" ]; then
  if [ -n "$(ls -A "$D")" ]; then
    echo "start-postgres: $D is neither empty nor a PostgreSQL data directory" >&2; exit 1
  fi
  log=$(mktemp)
  as_owner "$BIN/initdb" -D "$D" -U postgres --auth=trust --encoding=UTF8 --locale=C --no-sync >"$log" 2>&1 ||
    { cat "$log" >&2; rm -f "$log"; exit 1; }
  rm -f "$log"
  cat >>"$D/postgresql.conf" <<CONF

# scripts/start-postgres.sh: a throwaway server
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$D'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
CONF
  # local connections only, without a password
  printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' >"$D/pg_hba.conf"
fi

if ! as_owner "$BIN/pg_ctl" -D "$D" status >/dev/null 2>&1; then
  as_owner "$BIN/pg_ctl" -D "$D" -l "$D/server.log" -o "-p $PORT" -w -t 60 start >/dev/null ||
    { echo "start-postgres: the server did not start:" >&2; tail -20 "$D/server.log" >&2; exit 1; }
fi
PORT=$(sed -n 4p "$D/postmaster.pid")  # the port it really listens on (an already running server keeps its own)
if [ -x "$BIN/pg_isready" ]; then  # pg_ctl -w waited for the pid file; this waits for connections
  for _ in $(seq 100); do
    "$BIN/pg_isready" -q -h "$D" -p "$PORT" && break
    sleep 0.1
  done
  "$BIN/pg_isready" -q -h "$D" -p "$PORT" || { echo "start-postgres: the server does not answer:" >&2; tail -20 "$D/server.log" >&2; exit 1; }
fi
echo "postgresql://postgres@127.0.0.1:$PORT/postgres"
