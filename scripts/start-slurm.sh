#!/usr/bin/env bash
# Start a single-host Slurm cluster: munged (if not running), slurmctld and N `slurmd -N gpu-0X` nodes, each with
# Gres=gpu:<type>:<count> on placeholder device nodes. Idempotent: daemons whose pid file points at a live process are
# left alone. Installs nothing (scripts/install-components.sh slurm does).
#
# Usage: scripts/start-slurm.sh [RUN_DIR]     (default: $SLURM_DIR, else ./.slurm)
#   Env: SLURM_NODES (4), SLURM_GPU_TYPE (h100), SLURM_GPUS (8), SLURM_PORT_BASE (17000), SLURM_CTLD_PORT (6817),
#        SLURM_EXTRA_CONF (lines appended to slurm.conf, e.g. "Prolog=...\nPrologFlags=Alloc"; default none)
# Then: export SLURM_CONF=RUN_DIR/etc/slurm.conf   (the script prints it)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
D=${1:-${SLURM_DIR:-$PWD/.slurm}}
mkdir -p "$D" && D=$(cd "$D" >/dev/null && pwd)
NODES=${SLURM_NODES:-4}
GPU_TYPE=${SLURM_GPU_TYPE:-h100}
GPUS=${SLURM_GPUS:-8}
PORT_BASE=${SLURM_PORT_BASE:-17000}
CTLD_PORT=${SLURM_CTLD_PORT:-6817}
HOST=$(hostname -s)
export SLURM_CONF=$D/etc/slurm.conf

for tool in slurmctld slurmd scontrol sinfo munge munged; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || {
    echo "start-slurm: $tool not found; run scripts/install-components.sh slurm" >&2; exit 1; }
done

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# munge: one per host, shared by every Slurm daemon.
if ! munge -n >/dev/null 2>&1; then
  install -d -o munge -g munge -m 0755 /run/munge
  [ -s /etc/munge/munge.key ] || { mungekey -c -k /etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; }
  setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged
  for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
fi

mkdir -p "$D/etc" "$D/state" "$D/log" "$D/fakedev"
names=()
node_lines=""
for i in $(seq 1 "$NODES"); do
  n=$(printf 'gpu-%02d' "$i")
  names+=("$n")
  mkdir -p "$D/spool/$n"
  node_lines+="NodeName=$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((PORT_BASE + i)) CPUs=64 Boards=1 "
  node_lines+="SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=1000000 Gres=gpu:$GPU_TYPE:$GPUS "
  node_lines+="Feature=rack:r$(( (i - 1) / 2 )),leaf:leaf$(( (i - 1) / 2 )) State=UNKNOWN"$'\n'
done
for i in $(seq 0 $((GPUS - 1))); do
  [ -c "$D/fakedev/nvidia$i" ] || mknod "$D/fakedev/nvidia$i" c 195 "$i"
done
range="gpu-[01-$(printf '%02d' "$NODES")]"

render() {
  python3 - "$1" "$2" <<PY
import sys
text = open(sys.argv[1]).read()
subs = {"@SLURM_DIR@": "$D", "@HOST@": "$HOST", "@CTLD_PORT@": "$CTLD_PORT", "@NODE_RANGE@": "$range",
        "@GPU_TYPE@": "$GPU_TYPE", "@GPU_LAST@": "$((GPUS - 1))", "@NODES@": """$node_lines""".rstrip()}
for k, v in subs.items():
    text = text.replace(k, v)
open(sys.argv[2], "w").write(text)
PY
}
render "$REPO/deploy/slurm/slurm.conf.in" "$D/etc/slurm.conf"
if [ -n "${SLURM_EXTRA_CONF:-}" ]; then
  printf '# From SLURM_EXTRA_CONF:\n%s\n' "$SLURM_EXTRA_CONF" >> "$D/etc/slurm.conf"
fi
render "$REPO/deploy/slurm/gres.conf.in" "$D/etc/gres.conf"
: > "$D/etc/plugstack.conf"   # else slurmd reads /etc/slurm/plugstack.conf

if ! alive "$D/state/slurmctld.pid"; then
  slurmctld -f "$SLURM_CONF"
fi
for _ in $(seq 100); do timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
timeout 5 scontrol ping | grep -q 'is UP' || { echo "start-slurm: slurmctld did not come up:" >&2; tail -5 "$D/log/slurmctld.log" >&2; exit 1; }

for n in "${names[@]}"; do
  alive "$D/spool/slurmd-$n.pid" || slurmd -f "$SLURM_CONF" -N "$n"
done
for _ in $(seq 200); do
  up=$(timeout 5 sinfo -h -N -t idle,mixed,alloc,drain,drng -o %N 2>/dev/null | sort -u | wc -l)
  [ "$up" -ge "$NODES" ] && break
  sleep 0.1
done
if [ "$up" -lt "$NODES" ]; then
  echo "start-slurm: only $up of $NODES nodes registered:" >&2; sinfo -N >&2 || true; exit 1
fi
echo "export SLURM_CONF=$SLURM_CONF"
