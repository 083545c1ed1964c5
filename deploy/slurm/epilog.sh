#!/usr/bin/env bash
# gpufleet's Slurm Epilog: take the ending job's id out of the job-map directory that prolog.sh fills (one file per GPU
# index, one job id a line), leaving other jobs' ids in place, and delete a GPU's file once no job is left in it.
#
# slurmd runs it as SlurmdUser (root) on every node of the allocation when the job ends (also after a failed Prolog),
# with only the variables slurmd builds (no PATH; SLURM_JOB_ID, SLURMD_NODENAME, SLURM_CONF among them). It looks for
# the job in every GPU's file rather than trusting SLURM_JOB_GPUS, so a job mapped under other indices (a changed
# gres.conf, a restarted slurmd) is still removed. A failing Epilog drains the node, so this script always exits 0.
#
# Settings: the same file as prolog.sh (the first that exists of $GPUFLEET_SLURM_ENV, gpufleet-slurm.env beside
# slurm.conf, /etc/gpufleet/slurm.env); this script reads GPUFLEET_JOB_MAP_DIR (/run/gpufleet/job-map),
# GPUFLEET_LOG_DIR (/var/log/gpufleet) and PATH. It stands alone, like prolog.sh, so it can go in an epilog.d/.
set -u
umask 022
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

NODE=${SLURMD_NODENAME:-$(hostname -s)}
JOB=${SLURM_JOB_ID:-}
# Defaults; a variable already in the environment (a run by hand: slurmd passes none of these) comes first.
: "${GPUFLEET_JOB_MAP_DIR:=/run/gpufleet/job-map}"
: "${GPUFLEET_LOG_DIR:=/var/log/gpufleet}"

log() {  # log PRIORITY MESSAGE...: to syslog (when there is one) and to $GPUFLEET_LOG_DIR/slurm.log
  local priority=$1
  shift
  local line="$NODE job ${JOB:-?} epilog: $*"
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

# Remove this job's id from every GPU file holding it, under the same lock as the prolog's writes; a file replaced
# whole (rename) or deleted, so a reader never sees half a file.
unmap_job() {
  local dir=$GPUFLEET_JOB_MAP_DIR file tmp
  local -a freed=()
  [ -d "$dir" ] || return 0
  { exec 9>"$dir/.lock"; } 2>/dev/null && flock -w 30 9 || log warning "no lock on $dir/.lock; editing anyway"
  for file in "$dir"/*; do
    [[ ${file##*/} =~ ^[0-9]+(\.[0-9]+)?$ ]] && [ -f "$file" ] || continue
    grep -qxF -e "$JOB" "$file" 2>/dev/null || continue
    tmp=$dir/.${file##*/}.$$
    if ! grep -qvxF -e "$JOB" -e '' "$file"; then  # no other job left on this GPU
      rm -f "$file"
    elif grep -vxF -e "$JOB" -e '' "$file" 2>/dev/null >"$tmp" && mv -f "$tmp" "$file"; then
      :
    else
      rm -f "$tmp"
      log warning "cannot rewrite $file"
      continue
    fi
    freed+=("${file##*/}")
  done
  exec 9>&-
  [ ${#freed[@]} -eq 0 ] || log info "unmapped GPUs ${freed[*]} from the job in $dir"
}

load_settings
[ -n "$JOB" ] && unmap_job
exit 0
