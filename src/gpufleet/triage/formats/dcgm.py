"""DCGM's outputs: `dcgmi diag` results, `dcgmi health -c` reports and dcgm-exporter's `/metrics` scrape."""

from __future__ import annotations

from gpufleet.parsers.nvidia.dcgmi_diag import parse_diag
from gpufleet.parsers.nvidia.dcgmi_health import HealthReport, parse_health_any
from gpufleet.parsers.nvidia.dcgmi_tools import parse_discovery, parse_dmon
from gpufleet.parsers.prometheus_text import Item, parse_lines
from gpufleet.triage.formats.registry import Format
from gpufleet.triage.readers.dcgm import read_dcgmi_diag, read_dcgmi_health
from gpufleet.triage.readers.dcgm_exporter import read_dcgm_exporter_metrics
from gpufleet.triage.readers.dcgm_tools import read_dcgmi_discovery, read_dcgmi_dmon

# dcgmi/Diag.cpp (2.x-4.x): the table's header, its category rows, result rows (`Pass - All`, `Fail - GPU: 0`,
# 4.x `GPU0: Pass`), message rows, and dcgmi's own failures when it prints no table
DCGMI_DIAG = Format(
    name="dcgmi-diag",
    summary="`dcgmi diag -r N` (the table or -j JSON): each test's result per GPU, and dcgmi's own errors",
    signs=(
        (r"^\|\s*Diagnostic\s+\|\s*Result\s*\|", 10),
        (r"^[|+]-+\s+(?:Metadata|Deployment|Hardware|Integration|Stress|Training)\s+-+\+", 8),
        (r"^Successfully ran diagnostic", 6),
        (r"^\| [\w /-]{1,40}\| (?:Pass|Fail|Warn|Skip|Not Run)(?: - (?:All|GPUs?: [\d, ]{1,60}))? {0,50}\|", 6),
        (r"^\|\s+\|\s*(?:GPU|CPU)\d+:\s*(?:Pass|Fail|Warn|Skip|Not Run)\s*\|", 6),
        (r"^\|\s*(?:Warning|Error|Info)(?::\s*(?:GPU|CPU)\d+)?\s+\|\s*\S", 3),
        (r"^Error: (?:Unable to complete diagnostic|Diagnostic (?:could not be run|can only be performed))", 8),
        (r"^\s*\"DCGM (?:GPU )?Diagnostic\"\s*:", 10),  # `dcgmi diag -j` (NvvsJsonStrings.h NVVS_NAME)
        (r"^\s*\"test_categories\"\s*:", 4),
    ),
    parse=parse_diag,
    judge=read_dcgmi_diag,
)


def _parse_health(text: str, source: str) -> HealthReport:
    return parse_health_any(text)


# dcgmi/Health.cpp (2.x-4.x): `dcgmi health -c` (and `-f`, the list of watches), or its own failure; `-j` is the
# same tree as JSON (DcgmiOutputJson: a `header` list and `body` nodes of value, overflow and children)
DCGMI_HEALTH = Format(
    name="dcgmi-health",
    summary="`dcgmi health -c` (or `-j`): each GPU's systems as DCGM's health watches rate them",
    signs=(
        (r"^\|\s*Health Monitor Report", 10),
        (r"^\|\s*Overall Health\s*\|", 8),
        (r"^\|\s*Health monitor systems report", 10),
        (r"^\| {1,12}-> (?:Errors|\d+) {1,40}\|", 4),
        (r"^Error: (?:Unable to check health watches|Health watches not enabled)", 8),
        (r'^\s*"header"\s*:\s*\[\s*"Health Monitor Report"', 10),
        (r'^\s*"Overall Health"\s*:\s*\{', 10),
    ),
    parse=_parse_health,
    judge=read_dcgmi_health,
)


# dcgmi/DeviceMonitor.cpp: the `#Entity` header of short names and its `ID` units line (2.x: `# Entity`, `Id`)
DCGMI_DMON = Format(
    name="dcgmi-dmon",
    summary="`dcgmi dmon -e ...`: DCGM field samples per entity (Xid, ECC, row remap, retired pages, clocks events)",
    signs=(
        (r"^#\s?Entity\s+[A-Z0-9#]{2,12}\b", 10),
        (r"^\s*I[Dd](?:\s+\S+)*\s*$", 1),
        (r"^(?:GPU|GPU-I|GPU-CI|Switch) \d+\s+(?:[-\d.]+|N/A)\s+(?:[-\d.]+|N/A)", 3),
    ),
    parse=parse_dmon,
    judge=read_dcgmi_dmon,
)

# dcgmi/Query.cpp (2.x-4.x): `N GPUs found.` (4.x: `(Active)`), then the GPU ID / Device Information table
DCGMI_DISCOVERY = Format(
    name="dcgmi-discovery",
    summary="`dcgmi discovery -l`: the GPUs, NvSwitches and ConnectX DCGM finds, and any it lost",
    signs=(
        (r"^\d+ GPUs? found(?: \((?:All|Active)\))?\.", 8),
        (r"^\|\s*GPU ID\s*\|\s*Device Information\s*\|", 10),
        (r"^\d+ NvSwitch(?:es)? found\.", 6),
        (r"^\|\s*\d*\s*\|\s*(?:PCI Bus ID|Device UUID): ", 4),
    ),
    parse=parse_discovery,
    judge=read_dcgmi_discovery,
)


def _parse_metrics(text: str, source: str) -> list[Item]:
    return list(parse_lines(text.splitlines()))


# dcgm-exporter's /metrics (rendermetrics templates), and the 1.x `dcgm_*` names
DCGM_EXPORTER_METRICS = Format(
    name="dcgm-exporter-metrics",
    summary="A dcgm-exporter `/metrics` scrape: Xid, ECC, row remapping, clocks events and temperatures per GPU",
    signs=(
        (r"^# (?:HELP|TYPE) DCGM_", 10),
        (r"^DCGM_(?:FI|EXP)_[A-Z0-9_]+\{", 8),
        (r"^# (?:HELP|TYPE) dcgm_[a-z0-9_]+ ", 6),
        (r"^dcgm_[a-z0-9_]+\{[^}]*\bgpu=\"", 6),
    ),
    parse=_parse_metrics,
    judge=read_dcgm_exporter_metrics,
)
