#!/usr/bin/env bash
# gpufleet's Slurm Prolog: a health gate, then the job's GPUs written to the job-map directory that
# `gpufleet agent --job-map-dir` reads (dcgm-exporter's --hpc-job-mapping-dir format: one file per GPU index, one job
# id a line).
#
# slurmd runs it as SlurmdUser (root) on every node of the allocation when slurm.conf has PrologFlags=Alloc, with only
# the variables slurmd builds: no PATH, nothing from slurmd's own environment; SLURM_JOB_ID, SLURM_JOB_GPUS (the job's
# GPU indices on this node), SLURMD_NODENAME and SLURM_CONF among them. A non-zero exit makes Slurm drain the node
# (Reason "Prolog error") and requeue the job held, so this script exits non-zero for a health verdict of Fail (or
# Unknown with GPUFLEET_ON_UNKNOWN=drain) and never for its own bookkeeping. What it prints reaches slurmd's log only
# when it fails.
#
# Settings are shell assignments, read (as root: the file must be owned by root and writable by root alone) from the
# first file that exists of $GPUFLEET_SLURM_ENV, gpufleet-slurm.env beside slurm.conf, /etc/gpufleet/slurm.env:
#   GPUFLEET_DIAG          the health check; it prints `gpufleet diag`'s JSON, and its "verdict" is what counts
#                          (default: gpufleet diag -r 1 --node <node> -o json); empty: no health gate
#   GPUFLEET_DIAG_TIMEOUT  seconds before the check is stopped and counted as Unknown (60); keep slurm.conf's
#                          PrologEpilogTimeout above it
#   GPUFLEET_ON_UNKNOWN    start (log a warning, start the job) or drain, when the check cannot say (start)
#   GPUFLEET_JOB_MAP_DIR   the job-map directory (/run/gpufleet/job-map)
#   GPUFLEET_LOG_DIR       slurm.log (one line per event) and diag-<node>.json (the last verdict) (/var/log/gpufleet)
#   PATH                   where gpufleet and the tools are found (default: the system directories)
# $SLURMD_NODENAME may be used in them. This file and epilog.sh stand alone (no shared library) so both can be dropped
# into prolog.d/ and epilog.d/ directories, where Slurm would run a helper file as a script too.
set -u
umask 022
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

NODE=${SLURMD_NODENAME:-$(hostname -s)}
JOB=${SLURM_JOB_ID:-}
# Defaults; a variable already in the environment (a run by hand: slurmd passes none of these) comes first.
: "${GPUFLEET_DIAG=gpufleet diag -r 1 --node $NODE -o json}"
: "${GPUFLEET_DIAG_TIMEOUT:=60}"
: "${GPUFLEET_ON_UNKNOWN:=start}"
: "${GPUFLEET_JOB_MAP_DIR:=/run/gpufleet/job-map}"
: "${GPUFLEET_LOG_DIR:=/var/log/gpufleet}"

log() {  # log PRIORITY MESSAGE...: to syslog (when there is one) and to $GPUFLEET_LOG_DIR/slurm.log
  local priority=$1
  shift
  local line="$NODE job ${JOB:-?} prolog: $*"
  logger -t gpufleet-slurm -p "daemon.$priority" -- "$line" 2>/dev/null
  mkdir -p "$GPUFLEET_LOG_DIR" 2>/dev/null
  printf '%s %s %s\n' "$(date -Iseconds)" "$priority" "$line" 2>/dev/null >>"$GPUFLEET_LOG_DIR/slurm.log"
}

load_settings() {
  local file
  for file in "${GPUFLEET_SLURM_ENV:-}" "${SLURM_CONF:+${SLURM_CONF%/*}/gpufleet-slurm.env}" /etc/gpufleet/slurm.env; do
    [ -n "$file" ] && [ -f "$file" ] || continue
    local owner
    owner=$(stat -c %u "$file" 2>/dev/null)
    if { [ "$owner" != 0 ] && [ "$owner" != "$(id -u)" ]; } || [ -n "$(find "$file" -maxdepth 0 -perm /022)" ]; then
      log err "ignoring $file: it is sourced as $(id -un), so it must be owned by root and writable by root alone"
      return
    fi
    # shellcheck disable=SC1090
    . "$file" || log warning "$file had errors; using what it set"
    return
  done
}

# The job's GPU indices on this node. SLURM_JOB_GPUS holds Slurm's index of each GPU (NVML's order with
# AutoDetect=nvml, else gres.conf's); CUDA_VISIBLE_DEVICES is the same list, or UUIDs (MIG), so only a fallback.
job_gpus() {
  local list=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}} gpu
  local IFS=,
  for gpu in $list; do
    [[ $gpu =~ ^[0-9]+$ ]] && echo "$gpu"
  done
}

# Add this job's id to each of its GPUs' files. One writer at a time (flock), and each file replaced whole (rename),
# so a reader never sees half a file.
map_job() {
  local dir=$GPUFLEET_JOB_MAP_DIR gpu file tmp
  [ $# -gt 0 ] || return 0
  if ! mkdir -p "$dir" 2>/dev/null; then
    log warning "cannot create $dir; GPUs $* not mapped to the job"
    return 0
  fi
  { exec 9>"$dir/.lock"; } 2>/dev/null && flock -w 30 9 || log warning "no lock on $dir/.lock; writing anyway"
  for gpu in "$@"; do
    file=$dir/$gpu
    tmp=$dir/.$gpu.$$
    if { [ -f "$file" ] && grep -vxF -e "$JOB" -e '' "$file"; echo "$JOB"; } 2>/dev/null >"$tmp" && mv -f "$tmp" "$file"
    then :
    else
      rm -f "$tmp"
      log warning "cannot write $file"
    fi
  done
  exec 9>&-
  log info "mapped GPUs $* to the job in $dir"
}

verdict_of() {  # the top-level "verdict" of gpufleet diag's JSON (it comes before the checks)
  sed -n 's/^ *"verdict": *"\([A-Za-z]*\)".*/\1/p' <<<"$1" | head -n 1
}

failed_checks() {  # "name: detail; ..." of the checks whose status is Fail
  awk -F'"' '/"name":/ { name = $4; failed = 0 }
    /"status": *"Fail"/ { failed = 1 }
    /"detail":/ && failed { printf "%s%s: %s", sep, name, $4; sep = "; "; failed = 0 }' <<<"$1"
}

# Run the check, one at a time on a node: jobs starting together would otherwise run dcgmi diag over each other. A
# prolog that waited while another ran the check takes that verdict (as fresh as its own would be) instead of
# queueing a run of its own, so a burst of jobs waits for at most two runs. Sets json, rc and errors.
run_check() {
  local verdict_file=$GPUFLEET_LOG_DIR/diag-$NODE.json since errfile
  since=$(date +%s)
  mkdir -p "$GPUFLEET_LOG_DIR" 2>/dev/null
  { exec 8>"$GPUFLEET_LOG_DIR/.diag-$NODE.lock"; } 2>/dev/null && flock -w "$GPUFLEET_DIAG_TIMEOUT" 8
  if [ -f "$verdict_file" ] && [ "$(stat -c %Y "$verdict_file")" -ge "$since" ]; then
    json=$(cat "$verdict_file")
    rc=reused
    errors=""
  else
    errfile=$(mktemp 2>/dev/null) || errfile=""
    json=$(timeout -k 10 "$GPUFLEET_DIAG_TIMEOUT" "${cmd[@]}" 2>"${errfile:-/dev/null}")
    rc=$?
    errors=""
    if [ -n "$errfile" ]; then
      errors=$(tail -c 300 "$errfile" | tr '\n' ' ')
      rm -f "$errfile"
    fi
    if [ -n "$(verdict_of "$json")" ]; then
      printf '%s\n' "$json" 2>/dev/null >"$verdict_file.$$" && mv -f "$verdict_file.$$" "$verdict_file"
    fi
  fi
  exec 8>&-
}

# 0: start the job here; 1: keep it off this node (Slurm drains the node and requeues the job).
health_gate() {
  [ -n "$GPUFLEET_DIAG" ] || return 0
  local -a cmd
  read -r -a cmd <<<"$GPUFLEET_DIAG"
  [[ $GPUFLEET_DIAG_TIMEOUT =~ ^[0-9]+$ ]] || GPUFLEET_DIAG_TIMEOUT=60
  local json rc errors verdict why
  run_check
  verdict=$(verdict_of "$json")
  case $verdict in
    Pass | Warn)
      [ "$rc" = reused ] && why=" (from the run another job's prolog just made)" || why=""
      log info "health check: $verdict$why"
      return 0
      ;;
    Fail)
      why="health check: Fail ($(failed_checks "$json")); verdict in $GPUFLEET_LOG_DIR/diag-$NODE.json"
      log err "$why; the node drains and the job is requeued"
      echo "gpufleet: $why"
      return 1
      ;;
    Unknown) why="health check: Unknown (it cannot say); verdict in $GPUFLEET_LOG_DIR/diag-$NODE.json" ;;
    *)
      [ "$rc" = 124 ] && why="timed out after ${GPUFLEET_DIAG_TIMEOUT}s" || why="exit $rc"
      why="health check \`${cmd[*]}\` gave no verdict ($why): $errors"
      ;;
  esac
  if [ "$GPUFLEET_ON_UNKNOWN" = drain ]; then
    log err "$why; GPUFLEET_ON_UNKNOWN=drain: the node drains and the job is requeued"
    echo "gpufleet: $why"
    return 1
  fi
  log warning "$why; starting the job (GPUFLEET_ON_UNKNOWN=$GPUFLEET_ON_UNKNOWN)"
  return 0
}

load_settings
health_gate || exit 1
mapfile -t gpus < <(job_gpus)
[ -n "$JOB" ] && map_job "${gpus[@]}"
exit 0
