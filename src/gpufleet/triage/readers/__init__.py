"""One reader per format: cleaned lines in, a judged `TriageReport` out. Each reuses the parser the rest of gpufleet
runs on the same tool's output (the agent's kernel-log parser and Xid policy, the nvidia-smi and dcgmi parsers,
NCCL diagnosis), so triage and the fleet agree about what a line means."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.errors import GpufleetError
from gpufleet.triage.readers.app_log import read_app_log
from gpufleet.triage.readers.common import Reader
from gpufleet.triage.readers.dcgm import read_dcgmi_diag, read_dcgmi_health
from gpufleet.triage.readers.dcgm_exporter import read_dcgm_exporter_metrics
from gpufleet.triage.readers.ib import (
    read_iblinkinfo,
    read_ibnetdiscover,
    read_ibqueryerrors,
    read_ibstat,
    read_ibstatus,
    read_perfquery,
)
from gpufleet.triage.readers.kernel import read_kernel_log
from gpufleet.triage.readers.kube import read_kubectl_describe_node, read_kubectl_node_json
from gpufleet.triage.readers.nccl import read_nccl_log, read_nccl_tests
from gpufleet.triage.readers.pod import read_kubectl_pod_json
from gpufleet.triage.readers.smi import (
    read_nvidia_smi_nvlink,
    read_nvidia_smi_q,
    read_nvidia_smi_table,
    read_nvidia_smi_topo,
)
from gpufleet.triage.report import TriageReport

READERS: dict[str, Reader] = {
    "kernel-log": read_kernel_log,
    "nvidia-smi-q": read_nvidia_smi_q,
    "nvidia-smi-table": read_nvidia_smi_table,
    "nvidia-smi-nvlink": read_nvidia_smi_nvlink,
    "nvidia-smi-topo": read_nvidia_smi_topo,
    "dcgmi-diag": read_dcgmi_diag,
    "dcgmi-health": read_dcgmi_health,
    "dcgm-exporter-metrics": read_dcgm_exporter_metrics,
    "nccl-log": read_nccl_log,
    "nccl-tests": read_nccl_tests,
    "kubectl-node-json": read_kubectl_node_json,
    "kubectl-describe-node": read_kubectl_describe_node,
    "kubectl-pod-json": read_kubectl_pod_json,
    "ibstat": read_ibstat,
    "ibstatus": read_ibstatus,
    "perfquery": read_perfquery,
    "ibqueryerrors": read_ibqueryerrors,
    "iblinkinfo": read_iblinkinfo,
    "ibnetdiscover": read_ibnetdiscover,
    "app-log": read_app_log,
}


def read(fmt: str, lines: Iterable[str], source: str) -> TriageReport:
    """Judge `lines` as `fmt`; a format without a reader yet, or a parser's refusal, is `unknown` saying why."""
    reader = READERS.get(fmt)
    if reader is None:
        report = TriageReport(fmt, source, judged=False)
        report.notes.append(f"recognised as {fmt}, which triage cannot judge yet")
        return report
    try:
        return reader(lines, source)
    except GpufleetError as exc:
        report = TriageReport(fmt, source, judged=False)
        report.notes.append(f"could not read it as {fmt}: {exc.message}")
        return report
