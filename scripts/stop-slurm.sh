#!/usr/bin/env bash
# Stop the slurmd nodes and slurmctld that scripts/start-slurm.sh started, by their pid files (munged keeps running:
# other Slurm users on the host may share it; pass --munge to stop it too).
# Usage: scripts/stop-slurm.sh [RUN_DIR] [--munge]
set -uo pipefail
D=${SLURM_DIR:-$PWD/.slurm}
stop_munge=0
for arg in "$@"; do
  case "$arg" in
    --munge) stop_munge=1 ;;
    *) D=$arg ;;
  esac
done
pids=()
for f in "$D"/spool/slurmd-*.pid "$D/state/slurmctld.pid"; do
  [ -f "$f" ] || continue
  p=$(cat "$f")
  kill "$p" 2>/dev/null && pids+=("$p")
done
if [ "$stop_munge" = 1 ] && [ -f /run/munge/munged.pid ]; then
  p=$(cat /run/munge/munged.pid); kill "$p" 2>/dev/null && pids+=("$p")
fi
for _ in $(seq 150); do
  alive=0
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null && [ "$(ps -o stat= -p "$p" | tr -d ' ')" != "Z" ]; then alive=1; fi
  done
  [ "$alive" = 0 ] && break
  sleep 0.1
done
[ "${alive:-0}" = 0 ] || { echo "stop-slurm: some daemons still running: ${pids[*]}" >&2; exit 1; }
