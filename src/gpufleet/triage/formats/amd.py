"""AMD's tools: amd-smi (its default view, text or --json) and rocm-smi (Concise Info, --json, --showmetrics,
--showrasinfo; --showtopo apart)."""

from __future__ import annotations

from gpufleet.parsers.amd.amd_smi import AmdSmiReport
from gpufleet.parsers.amd.amd_smi_default import parse_amd_smi_output
from gpufleet.parsers.amd.rocm_smi import parse_rocm_smi
from gpufleet.parsers.amd.rocm_topo import RocmTopology, parse_rocm_topology
from gpufleet.triage.formats.registry import Format, Table, View, cell
from gpufleet.triage.readers.vendor_smi import read_amd_smi, read_rocm_smi

_COLUMNS = ("GPU", "BDF", "NAME", "MODEL", "PARTITION", "GFX %", "VRAM MiB|%", "TEMP C", "POWER W", "ECC UE")


def _view(report: AmdSmiReport, source: str) -> View:
    rows = [
        [
            cell(g.index), cell(g.bdf), cell(g.market_name), cell(g.model), cell(g.partition or None),
            cell(g.gfx_activity_pct), cell(g.vram_used_mib if g.vram_used_mib is not None else g.vram_used_pct),
            cell(next((t for t in (g.temp_hotspot_c, g.temp_c, g.temp_edge_c) if t is not None), None)),
            cell(g.power_w),
            cell(g.ecc.uncorrectable),
        ]
        for g in report.gpus
    ]  # fmt: skip
    title = f"{source}: {report.tool} {report.format}" + (
        f", driver {report.driver_version}" if report.driver_version else ""
    )
    return View((Table(_COLUMNS, rows, title),), tuple(f"[yellow]unread[/yellow] {p}" for p in report.problems))


AMD_SMI = Format(
    name="amd-smi",
    summary="`amd-smi` alone (its default view, ROCm 7.0+), `amd-smi list`, `static`, `metric` or `partition`, text "
    "or --json (several may be concatenated): one record per GPU or partition",
    signs=(
        # the default view (AMD-SMI 26.0.0+, ROCm 7.0.0+: ROCm/amdsmi CHANGELOG "Added the Default command")
        (r"^\|\s*AMD-SMI \d+\.\d+\.\d+\S*\s+amdgpu version:", 10),
        (r"^\|\s*BDF\s+GPU-Name\s*\|\s*Mem-Uti\s+Temp\s+UEC\s+Power-Usage\s*\|", 10),
        (r"^\|\s*GPU\s+HIP-ID\s+OAM-ID\s+Partition-Mode\s*\|", 10),
        (r"^GPU: \d+\s*$", 6),
        (r"^\s+(?:MARKET_NAME|GFX_ACTIVITY|UMC_ACTIVITY|SOCKET_POWER|TARGET_GRAPHICS_VERSION|OAM_ID): ", 6),
        (r"^\s{4}(?:ASIC|BUS|USAGE|POWER|CLOCK|VRAM|BOARD|VBIOS|DRIVER|RAS|PARTITION|TEMPERATURE|ECC|PCIE):\s*$", 4),
        (r"^\s+BDF: [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d\s*$", 4),
        (r"^(?:CURRENT_PARTITION|MEMORY_PARTITION|ACCELERATOR_PARTITION_PROFILES):\s*$", 8),
        (r"^GPU_ID\s+MEMORY\s+ACCELERATOR_TYPE", 8),
        (r"AMDSMI_STATUS_[A-Z]", 6),
        # --json: a list of GPUs (or {"gpu_data": [...]}) keyed the same, lower case
        (r"^\s*\"(?:gfx_activity|umc_activity|market_name|asic_serial|oam_id|socket_power|gpu_data)\"\s*:", 8),
    ),
    parse=parse_amd_smi_output,
    judge=read_amd_smi,
    render=_view,
)

ROCM_SMI = Format(
    name="rocm-smi",
    summary="Plain `rocm-smi` (Concise Info, any release), `rocm-smi -a --json`, `--showmetrics` or `--showrasinfo`: "
    "one record per GPU",
    signs=(
        (r"^\s*=+ ROCm System Management Interface =+", 10),
        (r"^\s*=+ (?:Concise Info|GPU Metrics) =+", 8),
        (r"^\s*=+ End of ROCm SMI Log =+", 8),
        (r"^GPU\[\d+\]\s*: \S", 8),  # every section but the concise table: `GPU[0]  : key: value`
        (r"^\s*\{?\s*\"card\d+\"\s*:\s*\{", 10),  # --json
        # --showrasinfo (rocm_smi.py showRasInfo): a table per GPU under `GPU[N]:\tRAS INFO`
        (r"^\s*=+ RAS Info =+", 8),
        (r"^GPU\[\d+\]:\s+RAS INFO\s*$", 8),
        (r"^\s*Block\s+Status\s+Correctable Error\s+Uncorrectable Error", 8),
    ),
    parse=parse_rocm_smi,
    judge=read_rocm_smi,
    render=_view,
)


def _topo_view(topo: RocmTopology, source: str) -> View:
    rows = [
        [
            g,
            cell(topo.numa_node.get(g)),
            ",".join(map(str, topo.xgmi_peers(g))) or "-",
            cell(max((int(h) for (a, b), h in topo.hops.items() if a == g and b != g and h.isdigit()), default=None)),
            cell(max((int(w) for (a, b), w in topo.weight.items() if a == g and b != g and w.isdigit()), default=None)),
        ]
        for g in topo.gpus
    ]
    return View((Table(("GPU", "NUMA NODE", "XGMI PEERS", "MAX HOPS", "MAX WEIGHT"), rows, f"{source}: topology"),))


ROCM_SMI_TOPO = Format(
    name="rocm-smi-topo",
    summary="`rocm-smi --showtopo` (or --showtopoweight, --showtopohops, --showtopotype, --showtoponuma): the GPU "
    "pairs' weight, hops and link type (XGMI, PCIE), and each GPU's NUMA node",
    signs=(
        (r"^\s*=+ Weight between two GPUs =+", 10),
        (r"^\s*=+ Hops between two GPUs =+", 10),
        (r"^\s*=+ Link Type between two GPUs =+", 10),
        (r"^GPU\s?\[?\d+\]?\s*: \(Topology\) Numa (?:Node|Affinity):", 6),
    ),
    parse=parse_rocm_topology,
    render=_topo_view,
)
