"""Every tool output gpufleet reads, in one registry: `gpufleet read` makes a subcommand of each format with a
parser, `gpufleet triage` tells them apart by their signs and judges each with its reader.

A new format is one descriptor (a `Format` in the module of its family, or a module of its own) and one line
below. The order is the order of both commands' help, and detection's tie-break (the first listed wins)."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.triage.formats import (
    amd,
    app,
    bmc,
    clock,
    dcgm,
    fabric_settings,
    gaudi,
    infiniband,
    kernel,
    kube,
    nccl,
    nvidia,
)
from gpufleet.triage.formats.registry import Format, Option, Registry, Table, View
from gpufleet.triage.report import TriageReport

REGISTRY = Registry(
    (
        kernel.KERNEL_LOG,
        kernel.LINK_EVENTS,
        kernel.NHC,
        nvidia.SMI_Q,
        nvidia.SMI_TABLE,
        nvidia.SMI_QUERY_GPU,
        nvidia.SMI_MIG,
        nvidia.SMI_NVLINK,
        nvidia.SMI_TOPO,
        nvidia.SMI_PROCESSES,
        nvidia.DEVICE_PLUGIN_LOG,
        dcgm.DCGMI_DIAG,
        dcgm.DCGMI_HEALTH,
        dcgm.DCGMI_DMON,
        dcgm.DCGMI_DISCOVERY,
        dcgm.DCGM_EXPORTER_METRICS,
        amd.AMD_SMI,
        amd.ROCM_SMI,
        amd.ROCM_SMI_TOPO,
        gaudi.HL_SMI,
        nccl.NCCL_LOG,
        nccl.NCCL_TESTS,
        nccl.NCCL_RAS,
        infiniband.IBSTAT,
        infiniband.IBSTATUS,
        infiniband.PERFQUERY,
        infiniband.IBQUERYERRORS,
        infiniband.IBLINKINFO,
        infiniband.IBNETDISCOVER,
        infiniband.IBV_DEVINFO,
        infiniband.MLXLINK,
        infiniband.IBDIAGNET,
        fabric_settings.OPENSM_CONF,
        fabric_settings.PARTITIONS_CONF,
        fabric_settings.MLNX_QOS,
        fabric_settings.SAQUERY_SMIR,
        fabric_settings.SMPQUERY_PORTINFO,
        bmc.IPMITOOL_SDR,
        bmc.IPMITOOL_SEL,
        clock.CHRONY_TRACKING,
        clock.NTPQ_RV,
        clock.TIMEDATECTL_TIMESYNC,
        kube.KUBECTL_NODE_JSON,
        kube.KUBECTL_POD_JSON,
        kube.KUBECTL_DESCRIBE_NODE,
        kube.KUBECTL_NODE_YAML,
        kube.KUBECTL_POD_YAML,
        kube.KUBECTL_DESCRIBE_POD,
        kube.KUBECTL_EVENTS,
        app.APP_LOG,
    )
)


def read(fmt: str, lines: Iterable[str], source: str) -> TriageReport:
    """Judge `lines` as the format named `fmt`; an unknown name, or a parser's refusal, is `unknown` saying why."""
    return REGISTRY.judge(fmt, lines, source)


__all__ = ["REGISTRY", "Format", "Option", "Registry", "Table", "View", "read"]
