#!/usr/bin/env bash
# Install the Debian packages that real-component tests need. Idempotent: packages already present are skipped,
# and `apt-get update` runs at most once per invocation (and only when something is missing).
#
# Usage: scripts/install-components.sh [GROUP|PACKAGE]...
#   Groups are listed below; any other word is taken as a Debian package name.
#   With no argument, every group is installed.
#   scripts/install-components.sh --list   prints the groups.
set -euo pipefail

# One line per group: "name: package package ...". Add a group by adding a line.
GROUPS_TABLE="
prometheus: prometheus prometheus-alertmanager victoria-metrics
chromium: chromium fonts-dejavu-core
ib: ibsim-utils infiniband-diags opensm libumad2sim0 rdma-core
slurm: slurm-wlm slurmd slurmctld slurmrestd slurm-client munge slurm-wlm-jwt-plugin
postgresql: postgresql
kubectl: kubernetes-client
"

# A package not needed where a command it would provide is already there (e.g. kubectl from another source).
PROVIDED_BY_COMMAND="
kubernetes-client: kubectl
"

group_packages() {
  local name="$1"
  printf '%s\n' "$GROUPS_TABLE" | awk -v g="$name:" '$1 == g { $1 = ""; sub(/^ /, ""); print }'
}

group_names() {
  printf '%s\n' "$GROUPS_TABLE" | awk -F: 'NF > 1 { print $1 }'
}

if [[ "${1:-}" == "--list" ]]; then
  while read -r g; do printf '%-12s %s\n' "$g" "$(group_packages "$g")"; done < <(group_names)
  exit 0
fi

requested=("$@")
if [[ ${#requested[@]} -eq 0 ]]; then
  mapfile -t requested < <(group_names)
fi

packages=()
for word in "${requested[@]}"; do
  expanded="$(group_packages "$word")"
  if [[ -n "$expanded" ]]; then
    read -r -a more <<<"$expanded"
    packages+=("${more[@]}")
  else
    packages+=("$word")
  fi
done

provided_by_command() {
  local command
  command="$(printf '%s\n' "$PROVIDED_BY_COMMAND" | awk -v p="$1:" '$1 == p { print $2 }')"
  [[ -n "$command" ]] && command -v "$command" >/dev/null 2>&1
}

missing=()
for pkg in "${packages[@]}"; do
  if provided_by_command "$pkg"; then
    continue
  fi
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-components: all present: ${packages[*]}"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-components: missing ${missing[*]}; run as root to install them" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-components: missing ${missing[*]} and apt-get is not available on this system" >&2
  exit 1
fi

echo "install-components: installing ${missing[*]}"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
