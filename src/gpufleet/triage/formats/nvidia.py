"""What nvidia-smi prints: `-q` (and `-q -x`), `--query-gpu` CSV, the boxed table (and the one line it prints when it
cannot run), `nvlink -s`, `topo -m`, and the processes on each GPU (`--query-compute-apps`, `pmon`)."""

from __future__ import annotations

from gpufleet.parsers.nvidia.device_plugin import parse_plugin_log
from gpufleet.parsers.nvidia.smi import NvidiaSmiReport, parse_query
from gpufleet.parsers.nvidia.smi_csv import parse_query_gpu
from gpufleet.parsers.nvidia.smi_mig import MigListing, parse_mig_listing
from gpufleet.parsers.nvidia.smi_processes import ProcessesReport, parse_processes
from gpufleet.parsers.nvidia.smi_table import parse_table
from gpufleet.parsers.nvidia.topo import parse_topo_matrix, read_nvlink_status
from gpufleet.triage.formats.registry import Format, Table, View, cell
from gpufleet.triage.readers.device_plugin import read_device_plugin_log
from gpufleet.triage.readers.smi import (
    read_nvidia_smi_nvlink,
    read_nvidia_smi_q,
    read_nvidia_smi_query_gpu,
    read_nvidia_smi_table,
    read_nvidia_smi_topo,
)
from gpufleet.triage.readers.smi_mig import read_nvidia_smi_mig


def _smi_view(report: NvidiaSmiReport, source: str) -> View:
    rows = [
        [
            cell(g.index), cell(g.pci), cell(g.product_name), cell(g.temp_c), cell(g.power_draw_w),
            cell(g.gpu_util_pct), f"{cell(g.memory_used_mib)} / {cell(g.memory_total_mib)}",
        ]
        for g in report.gpus
    ]  # fmt: skip
    title = f"{source}: driver {cell(report.driver_version)}, CUDA {cell(report.cuda_version)}"
    columns = ("GPU", "PCI", "PRODUCT", "TEMP C", "POWER W", "UTIL %", "MEMORY MiB")
    lines = [f"[red]unreachable[/red] {pci}: {why}" for pci, why in report.unreachable.items()]
    lines += [f"[red]error[/red] {error}" for error in report.errors]
    return View((Table(columns, rows, title),), tuple(lines))


SMI_Q = Format(
    name="nvidia-smi-q",
    summary="`nvidia-smi -q` or `-q -x`: one record per GPU (ECC, remapped rows, retired pages, clocks events)",
    signs=(
        (r"^=+NVSMI LOG=+", 10),
        (r"^Attached GPUs\s+:", 8),
        (r"^GPU [0-9A-Fa-fXx]{4,8}:(?:[0-9A-Fa-fXx]{2}:[0-9A-Fa-fXx]{2}\.[\dXx]|\.\.\.)\s*$", 6),
        (r"^\s*Product Name\s+:", 3),
        (r"^\s+(?:Volatile|Aggregate)\s*$", 2),
        (r"^\s*ECC Errors\s*$", 4),
        (r"^\s*(?:SRAM|DRAM) (?:Correctable|Uncorrectable)\s+:", 4),
        (r"^\s*(?:Remapped Rows|Retired Pages|Clocks Event Reasons|Clocks Throttle Reasons)\s*$", 4),
        # the keys of those sections, so one section pasted alone is told (nvidia-smi 418-580 `-q` key names)
        (
            r"^\s*(?:HW (?:Thermal |Power Brake )?Slowdown|SW (?:Power Cap|Thermal Slowdown)|Sync Boost"
            r"|Applications Clocks Setting)\s+:\s*(?:Active|Not Active)\s*$",
            4,
        ),
        (r"^\s*Remapping Failure Occurred\s+:\s*(?:Yes|No)\s*$", 4),
        (r"^\s*(?:Correctable|Uncorrectable) Error\s+:\s*(?:\d+|N/A)\s*$", 2),
        (r"^\s*Pending Page (?:Blacklist|Retirement)\s+:\s*(?:Yes|No|N/A)\s*$", 4),
        (r"^\s*(?:Single|Double) Bit ECC\s+:\s*(?:\d+|N/A)\s*$", 3),
        (r"^\s*GPU Recovery Action\s+:", 4),
        # the sections and keys of an excerpt without any of the above (R418-R580 key names)
        (
            r"^\s*(?:GPU )?Power Readings\s*$|^\s*Clock Policy\s*$|^\s*(?:FB|BAR1) Memory Usage\s*$"
            r"|^\s*(?:Max|Applications|Default Applications|Max Customer Boost) Clocks\s*$",
            3,
        ),
        (r"^\s*GPU (?:Current|Shutdown|Slowdown|Max Operating|Target) Temp\s+:", 3),
        (r"^\s*(?:Power Draw|(?:Enforced |Default |Min |Max |Current )?Power Limit|Power Management)\s+:", 3),
        (r"^\s*(?:Performance State|Persistence Mode|Compute Mode|Fan Speed)\s+:", 2),
        (r"^\s*<nvidia_smi_log>", 10),  # -q -x
    ),
    parse=parse_query,
    judge=read_nvidia_smi_q,
    render=_smi_view,
)

SMI_TABLE = Format(
    name="nvidia-smi-table",
    summary="Plain `nvidia-smi` (the boxed table): one record per GPU",
    signs=(
        (r"NVIDIA-SMI \d+\.\d+", 8),
        (r"^\|\s*GPU\s+Name\s+Persistence-M", 8),
        (r"^\+-{5,}\+", 2),
        (r"^\|\s+\d+\s+.*(?:On|Off)\s+\|\s+[0-9A-Fa-f]{8}:", 4),
        # a GPU's second row (fan, temp, perf, power), also pasted without the header: `|ERR!  50C  P0  N/A / N/A |`
        (
            r"^\|\s*(?:\d+%|N/A|ERR!)\s+(?:-?\d+C|N/A|ERR!)\s+(?:P\d+|N/A|ERR!)\s+(?:N/A|ERR!|[^\s/|]+)\s*/\s*"
            r"[^\s|]+\s*\|",
            6,
        ),
        # what plain nvidia-smi prints instead of the table (nvidia-smi 450-580; health.nvml_access says what each is)
        (r"^Unable to determine the device handle for (?:GPU|gpu)\s*[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:", 8),
        (r"^NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", 10),
        (r"^Failed to initialize NVML: ", 8),
        (r"^No devices were found\s*$", 6),
        (r"^(?:Unable to determine the device handle for .*: )?GPU is lost\.\s+Reboot the system", 8),
    ),
    parse=parse_table,
    judge=read_nvidia_smi_table,
    render=_smi_view,
)

_CSV_HEADER = r"^[a-z][\w.]*(?: \[[^\]]{0,16}\])?(?:, ?[a-z][\w.]*(?: \[[^\]]{0,16}\])?)*"
_GPU_PROPERTY = (
    r"(?:pci\.bus_id|temperature\.gpu|ecc\.errors\.|remapped_rows\.|retired_pages\.|clocks_(?:event|throttle)_reasons\."
    r"|gpu_recovery_action|utilization\.gpu|memory\.(?:used|total)|power\.draw|pcie\.link\.|ecc\.mode\.)"
)
# fields only hl-smi -Q prints (docs.habana.ai hl-smi "-Q" queries): a header naming one is hl-smi's, not nvidia-smi's
_HL_SMI_ONLY = r"(?!.*\b(?:module_id|[\w.]+\.aip)\b)"
SMI_QUERY_GPU = Format(
    name="nvidia-smi-query-gpu",
    summary="`nvidia-smi --query-gpu=... --format=csv`: ECC, remapped rows, retired pages, clocks events, PCIe link "
    "and recovery action per GPU",
    signs=(
        (r"--query-gpu[= ][\w.,]+", 10),
        # its header: properties as `nvidia-smi --help-query-gpu` names them, a unit in brackets unless nounits
        (_HL_SMI_ONLY + _CSV_HEADER + r", ?" + _GPU_PROPERTY, 10),
        (r"^" + _HL_SMI_ONLY + _GPU_PROPERTY + r"[\w.]*(?: \[[^\]]{0,16}\])?, ?[a-z]", 10),
    ),
    parse=parse_query_gpu,
    judge=read_nvidia_smi_query_gpu,
    render=_smi_view,
)


def _mig_view(listing: MigListing, source: str) -> View:
    gis = [[gpu, m.profile, m.gi_id, f"{m.start}:{m.size}"] for gpu, ms in (listing.gpu_instances or {}).items()
           for m in ms]  # fmt: skip
    cis = [[c.gpu, c.gi_id, c.profile, c.ci_id] for c in listing.compute_instances or []]
    tables = (Table(("GPU", "PROFILE", "GI", "PLACEMENT"), gis, f"{source}: GPU instances"),
              Table(("GPU", "GI", "PROFILE", "CI"), cis, f"{source}: compute instances"))  # fmt: skip
    return View(tables, ("MIG is off on every GPU",) if listing.mig_off else ())


# nvidia-smi mig -lgi / -lci (nvidia-smi 450-580): the tables' titles, and the lines printed in place of one
SMI_MIG = Format(
    name="nvidia-smi-mig",
    summary="`nvidia-smi mig -lgi` / `-lci`: the GPU and compute instances of each MIG GPU",
    signs=(
        (r"^\|\s*GPU instances:\s*\|", 10),
        (r"^\|\s*Compute instances:\s*\|", 10),
        (r"^\|\s*\d+\s+(?:\d+\s+)?MIG \d+(?:c\.\d+)?g\.\d+gb\S*\s+\d+\s+\d+(?:\s+\d+:\d+)?\s*\|$", 4),
        (r"^No (?:GPU|compute) instances found", 8),
        (r"^No MIG-enabled devices found", 8),
    ),
    parse=parse_mig_listing,
    judge=read_nvidia_smi_mig,
    render=_mig_view,
)

SMI_NVLINK = Format(
    name="nvidia-smi-nvlink",
    summary="`nvidia-smi nvlink -s`: each GPU's NVLinks, their state and speed",
    signs=(
        (r"^GPU \d+: .*\(UUID: GPU-", 4),
        (r"^\s*Link \d+: (?:\d+(?:\.\d+)? ?GB/s|(?i:<inactive>|inactive)|ERR!)\s*$", 8),
        (r"(?i)^NVML: Unable to retrieve NVLink information as all links are inactive", 8),
        (r"(?i)^Device does not have or support NVLink", 6),
    ),
    parse=read_nvlink_status,
    judge=read_nvidia_smi_nvlink,
)

SMI_TOPO = Format(
    name="nvidia-smi-topo",
    summary="`nvidia-smi topo -m`: how each GPU pair and each GPU's NICs are connected, and CPU affinity",
    signs=(
        (r"^\s*GPU0\s+(?:GPU1|NIC0|mlx\d+_\d+|CPU Affinity)", 6),
        (r"^GPU\d+\s+(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS)\s+(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS)\b", 6),
        (r"X\s+= Self", 8),
        (r"NV\d+\s+= Connection traversing a bonded set", 4),
    ),
    parse=parse_topo_matrix,
    judge=read_nvidia_smi_topo,
)


def _processes_view(report: ProcessesReport, source: str) -> View:
    if report.format == "table":
        rows = [
            [cell(p.gpu), cell(p.gpu_instance_id), cell(p.compute_instance_id), p.pid, p.type, p.name,
             cell(p.used_memory_mib)]
            for p in report.processes
        ]  # fmt: skip
        columns: tuple[str, ...] = ("GPU", "GI", "CI", "PID", "TYPE", "NAME", "MEMORY MiB")
    elif report.format == "pmon":
        rows = [
            [s.cycle, s.gpu, s.pid, s.type, cell(s.sm_util), cell(s.mem_util), cell(s.fb_mib), s.name]
            for s in report.pmon
        ]
        columns = ("CYCLE", "GPU", "PID", "TYPE", "SM %", "MEM %", "FB MiB", "NAME")
    else:
        rows = [[a.gpu_uuid or "-", a.pid, a.name or "-", cell(a.used_memory_mib)] for a in report.compute_apps]
        columns = ("GPU UUID", "PID", "NAME", "MEMORY MiB")
    return View((Table(columns, rows, f"{source}: {report.format}"),))


SMI_PROCESSES = Format(
    name="nvidia-smi-processes",
    summary="The processes on each GPU: `nvidia-smi`'s Processes: table, `--query-compute-apps` CSV or `pmon`",
    signs=(
        (r"^\s*#\s*gpu\s+pid\s+type\b", 10),  # pmon's header, then its units line
        (r"^\s*#\s*Idx\s+#\s+C/G\b", 6),
        # --query-compute-apps --format=csv: a header naming pid and what it ran
        (
            r"^(?:[\w.]+(?: \[\w+\])?, ?)*pid, ?(?:[\w.]+(?: \[\w+\])?, ?)*"
            r"(?:process_name|used_gpu_memory|used_memory)\b",
            10,
        ),
        # the Processes: table pasted alone (a whole nvidia-smi output is the table format's)
        (r"^\|\s*Processes:\s*\|?\s*$", 6),
        (r"^\|\s*GPU\s+(?:GI\s+CI\s+)?PID\s+Type\s+Process name", 6),
    ),
    parse=parse_processes,
    render=_processes_view,
)


# NVIDIA/k8s-device-plugin's health messages, v0.9 to v0.17 (parsers/nvidia/device_plugin.py names each one)
DEVICE_PLUGIN_LOG = Format(
    name="nvidia-device-plugin-log",
    summary="The NVIDIA device plugin's log: the Xids it saw, NVML events it skipped, devices it marked unhealthy",
    signs=(
        (r"XidCriticalError: Xid=\d+", 10),
        (r"Skipping non-nvmlEventTypeXidCriticalError event", 10),
        (r"'[\w./-]+' device marked unhealthy: ", 10),
        (r"Ignoring the following XIDs for health checks", 8),
        (r"[Mm]arking all devices as unhealthy|; health checks disabled", 8),
        (r"Processing event \{Device:", 6),
    ),
    parse=parse_plugin_log,
    judge=read_device_plugin_log,
)
