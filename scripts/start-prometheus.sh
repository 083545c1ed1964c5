#!/usr/bin/env bash
# Start Prometheus (and optionally VictoriaMetrics) on 127.0.0.1 for tests, scraping one target.
#
# Usage: scripts/start-prometheus.sh --run-dir DIR [--target HOST:PORT] [--prometheus-port 9090]
#          [--victoria-metrics] [--vm-port 8428] [--rules FILE] [--interval 1s]
#        scripts/start-prometheus.sh --stop --run-dir DIR
# Writes DIR/prometheus.yml, DIR/prometheus.pid, DIR/victoria-metrics.pid and logs; waits until each is ready.
# Prometheus also accepts remote write (--web.enable-remote-write-receiver).
set -euo pipefail

run_dir="" target="" prom_port=9090 vm=0 vm_port=8428 rules="" interval="1s" stop=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --run-dir) run_dir="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --prometheus-port) prom_port="$2"; shift 2 ;;
    --victoria-metrics) vm=1; shift ;;
    --vm-port) vm_port="$2"; shift 2 ;;
    --rules) rules="$2"; shift 2 ;;
    --interval) interval="$2"; shift 2 ;;
    --stop) stop=1; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "start-prometheus: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$run_dir" ]] || { echo "start-prometheus: --run-dir is required" >&2; exit 2; }
mkdir -p "$run_dir"
run_dir="$(cd "$run_dir" && pwd)"

if [[ $stop -eq 1 ]]; then
  for name in prometheus victoria-metrics; do
    pidfile="$run_dir/$name.pid"
    if [[ -f "$pidfile" ]]; then
      kill "$(cat "$pidfile")" 2>/dev/null || true
      rm -f "$pidfile"
    fi
  done
  exit 0
fi

wait_ready() {  # url, name, pid
  for _ in $(seq 1 100); do
    if curl -fsS "$1" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$3" 2>/dev/null; then
      echo "start-prometheus: $2 exited; see $run_dir/$2.log" >&2; return 1
    fi
    sleep 0.1
  done
  echo "start-prometheus: $2 not ready after 10 s; see $run_dir/$2.log" >&2
  return 1
}

if [[ $vm -eq 1 ]]; then
  command -v victoria-metrics >/dev/null || { echo "start-prometheus: victoria-metrics not installed (scripts/install-components.sh prometheus)" >&2; exit 1; }
  victoria-metrics -httpListenAddr="127.0.0.1:$vm_port" -storageDataPath="$run_dir/vmdata" \
    -retentionPeriod=1d -search.latencyOffset=1s -search.disableCache >"$run_dir/victoria-metrics.log" 2>&1 &
  echo $! >"$run_dir/victoria-metrics.pid"
  wait_ready "http://127.0.0.1:$vm_port/health" victoria-metrics "$(cat "$run_dir/victoria-metrics.pid")"
fi

command -v prometheus >/dev/null || { echo "start-prometheus: prometheus not installed (scripts/install-components.sh prometheus)" >&2; exit 1; }
{
  echo "global:"
  echo "  scrape_interval: $interval"
  echo "  evaluation_interval: $interval"
  if [[ -n "$rules" ]]; then
    cp "$rules" "$run_dir/rules.yml"
    echo "rule_files: [rules.yml]"
  fi
  echo "scrape_configs:"
  if [[ -n "$target" ]]; then
    echo "  - job_name: gpufleet-agent"
    echo "    static_configs: [{targets: ['$target']}]"
  fi
  if [[ $vm -eq 1 ]]; then
    echo "remote_write:"
    echo "  - url: http://127.0.0.1:$vm_port/api/v1/write"
  fi
} >"$run_dir/prometheus.yml"
if [[ -z "$target" ]]; then sed -i 's/^scrape_configs:$/scrape_configs: []/' "$run_dir/prometheus.yml"; fi

prometheus --config.file="$run_dir/prometheus.yml" --storage.tsdb.path="$run_dir/data" \
  --web.listen-address="127.0.0.1:$prom_port" --web.enable-remote-write-receiver \
  >"$run_dir/prometheus.log" 2>&1 &
echo $! >"$run_dir/prometheus.pid"
wait_ready "http://127.0.0.1:$prom_port/-/ready" prometheus "$(cat "$run_dir/prometheus.pid")"
echo "start-prometheus: prometheus on 127.0.0.1:$prom_port$([[ $vm -eq 1 ]] && echo ", victoria-metrics on 127.0.0.1:$vm_port"); pids in $run_dir"
