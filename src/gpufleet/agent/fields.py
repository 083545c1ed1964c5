"""What a real node's agent fills, source by source (telemetry/field_sources.py): the GPU library's own declaration
(NVML, AMD SMI, HLML), the kernel log's Xid series, the InfiniBand ports in sysfs, the attribution of each GPU to its
workloads, the idle cost, the BMC's sensors, and an application's own /metrics when the agent scrapes one.
`gpufleet telemetry fields` says from these which source fills each field on a node and why one stays empty;
`gpufleet deploy size` counts what they fill."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from gpufleet.agent.bmc import FIELDS as BMC_FIELDS
from gpufleet.agent.xids import XidWindow
from gpufleet.catalog import load_ib_counters
from gpufleet.instrument import names
from gpufleet.telemetry.exposition.workload import FAMILIES as ATTRIBUTION_FAMILIES
from gpufleet.telemetry.field_sources import POD_INFO, SourceFields
from gpufleet.telemetry.fields import IB_PORT_RATE, IB_PORT_UP, IDLE_COST_FIELD

# the kernel-log source fills dcgm-exporter's two Xid series from the Xids the follower reads
KMSG = SourceFields(XidWindow.name, frozenset(XidWindow.fields))
IB_SYSFS = SourceFields(
    "ib-sysfs", frozenset([*(c.metric for c in load_ib_counters().values()), IB_PORT_UP, IB_PORT_RATE])
)
# the per-workload series only for the GPUs --workload-series selects (time-sliced and MPS ones by default): counted
# as if every GPU had them, an upper bound
ATTRIBUTION = SourceFields("attribution", frozenset({POD_INFO, "gpufleet_gpu_job_info", *ATTRIBUTION_FAMILIES}))
# the idle cost of each GPU whose model has a price (the catalog's or the cost config's), from its utilization
IDLE_COST = SourceFields("idle-cost", frozenset({IDLE_COST_FIELD}))
# the node's BMC through ipmitool (agent/bmc.py): fan speeds, chassis temperatures, power readings and the judged
# state of each fan, power supply and temperature sensor, one series per sensor (counted once per field)
BMC = SourceFields("bmc", frozenset(BMC_FIELDS))
APP = SourceFields(
    "app",
    frozenset(
        {
            names.TRAINING_LAST_STEP,
            names.TRAINING_STEP_DURATION,
            names.TRAINING_RANK_COMPUTE,
            names.INFERENCE_REQUEST_DURATION,
        }
    ),
)


def gpu_sources() -> dict[str, SourceFields]:
    """Each GPU library's source, as it declares what it fills (the Gaudi one by its readings)."""
    from gpufleet.sources.gpu import amdsmi, hlml, nvml

    return {
        "nvml": nvml.FIELDS,
        "amdsmi": amdsmi.FIELDS,
        "hlml": SourceFields("hlml", frozenset([*hlml.READINGS, *hlml.NIC_FIELDS])),
    }


def known_sources() -> dict[str, SourceFields]:
    """Every source an agent can run, by name (as gpufleet_source_up names it); DCGM's host engine as it declares
    itself before it knows a node's GPUs (their health; the profiling fields only per node)."""
    from gpufleet.sources.gpu.dcgm import FIELDS as DCGM

    return {**gpu_sources(), **{s.source: s for s in (KMSG, IB_SYSFS, ATTRIBUTION, IDLE_COST, APP, BMC, DCGM)}}


# `gpufleet agent` on an NVIDIA node, with what it runs by default: the BMC source is on unless --no-bmc (a node
# without ipmitool or /dev/ipmi0 says so in gpufleet_source_up{source="bmc"} 0), so its per-sensor series are counted
NVIDIA_AGENT = ("nvml", "kmsg", "ib-sysfs", "attribution", "idle-cost", "bmc")


def this_node(ib_sysfs: Path | None = None, kmsg: Path | None = None) -> tuple[list[SourceFields], list[str]]:
    """The sources `gpufleet agent` would run here, and why each one it would try is missing: the first GPU
    library that starts with devices (then the idle cost), DCGM's host engine on an NVIDIA node (its own
    declaration: the profiling fields its GPUs' metric groups have, which NVML's GPM then leaves to it), the kernel
    log if readable, the InfiniBand ports if any, and the attribution."""
    from gpufleet.agent.host import open_gpu_source
    from gpufleet.errors import GpufleetError
    from gpufleet.sources.node.inventory import SYSFS_IB, ib_ports

    known = known_sources()
    sources: list[SourceFields] = []
    missing: list[str] = []
    gpus, down = open_gpu_source(socket.gethostname())
    dcgm = _dcgm_here(gpus, missing)
    if gpus is not None:  # a source that knows its devices says what it fills on them (NVML: GPM or not)
        sources += [getattr(gpus, "fields", known[gpus.name]), IDLE_COST]
    if dcgm is not None:
        sources.append(dcgm)
    missing += [f"{name}: {why}" for name, why in down]
    path = kmsg or Path("/dev/kmsg")
    if os.access(path, os.R_OK):
        sources.append(KMSG)
    else:
        missing.append(f"kmsg: {path} is not readable here")
    try:
        ports = ib_ports(ib_sysfs or SYSFS_IB, "here")
    except GpufleetError as exc:
        ports, why = [], exc.message
    else:
        why = "no InfiniBand port"
    if ports:
        sources.append(IB_SYSFS)
    else:
        missing.append(f"ib-sysfs: {why}")
    sources.append(ATTRIBUTION)
    bmc = _bmc_here()
    if bmc:
        missing.append(f"bmc: {bmc}")
    else:
        sources.append(BMC)
    return sources, missing


def _dcgm_here(gpus: Any, missing: list[str]) -> SourceFields | None:
    """DCGM's declaration on this node, as the agent's `--dcgm auto` would find it (the local nv-hostengine), its
    profiling fields handed over from NVML's GPM; None, and why in `missing`, when there is none."""
    if gpus is None or gpus.name != "nvml":
        return None
    from gpufleet.sources.gpu.dcgm import DEFAULT_PORT, DcgmTarget, open_dcgm

    source, why = open_dcgm(gpus.entities(), DcgmTarget(f"127.0.0.1:{DEFAULT_PORT}"), 1.0)
    if source is None:
        missing.append(f"dcgm: {why}")
        return None
    try:
        gpus.gpm.hand_over(source.prof_by_gpu(), source.name)
        return source.fields
    finally:
        source.stop()


def _bmc_here() -> str:
    """Why the BMC source cannot read this node's BMC ('' when it can try): ipmitool and an IPMI device."""
    import shutil

    if shutil.which("ipmitool") is None:
        return "ipmitool is not installed"
    devices = [Path(p) for p in ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")]  # ipmitool's open interface
    if not any(d.exists() for d in devices):
        return "no IPMI device (/dev/ipmi0): no BMC, or its drivers are not loaded"
    if not any(os.access(d, os.R_OK | os.W_OK) for d in devices):
        return "/dev/ipmi0 is not readable and writable here"
    return ""


def named(names_: list[str], extra: dict[str, SourceFields] | None = None) -> list[SourceFields]:
    """The sources of these names (a UserError naming the known ones for an unknown name)."""
    from gpufleet.errors import UserError

    known = {**known_sources(), **(extra or {})}
    unknown = [n for n in names_ if n not in known]
    if unknown:
        raise UserError(f"unknown source(s): {', '.join(unknown)}", fix=f"use some of: {', '.join(known)}")
    return [known[n] for n in names_]
