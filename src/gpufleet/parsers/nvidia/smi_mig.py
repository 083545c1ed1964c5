"""`nvidia-smi mig -lgi`: the GPU instances of every MIG-enabled GPU, as the contract's MigInfo.

    +-------------------------------------------------------+
    | GPU instances:                                        |
    | GPU   Name             Profile  Instance   Placement  |
    |                          ID       ID       Start:Size |
    |=======================================================|
    |   0  MIG 3g.40gb           9        2          4:4    |
    +-------------------------------------------------------+
    |   0  MIG 2g.20gb          14        3          0:2    |
    +-------------------------------------------------------+

The table names no compute instance or MIG device, so `uuid` stays empty and `ci_id` unknown (`nvidia-smi -L`
and `mig -lci` say those). A host whose GPUs have MIG off prints `No MIG-enabled devices found.`; a MIG GPU
without instances prints `No GPU instances found.`: both are no instances, not errors.

`parse_mig_listing` reads `-lgi` and `-lci` together, as people paste them (both tables, either alone, or the
`No ... found` line in place of one). `-lci` (nvidia-smi 450-580; the Placement column since R470):

    +--------------------------------------------------------------------+
    | Compute instances:                                                 |
    | GPU     GPU       Name             Profile   Instance   Placement  |
    |       Instance                       ID        ID       Start:Size |
    |         ID                                                         |
    |====================================================================|
    |   0      9       MIG 1g.5gb           0         0          0:1     |
    +--------------------------------------------------------------------+
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.model.observe import MigInfo

_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<profile>\S+)\s+(?P<profile_id>\d+)\s+(?P<gi>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s*\|$"
)
_HEADER = ("GPU instances:", "GPU   Name", "Start:Size")
_NONE = ("No MIG-enabled devices found", "No GPU instances found")


def parse_mig_lgi(text: str, source: str = "nvidia-smi mig -lgi") -> dict[int, list[MigInfo]]:
    """GPU index -> its GPU instances in placement order. A table row that does not read is an error naming it."""
    out: dict[int, list[MigInfo]] = {}
    seen_table = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("+") or any(n in line for n in _NONE):
            continue
        if line.startswith("|=") or any(h in line for h in _HEADER):
            seen_table = True
            continue
        if line.startswith("|") and line.endswith("|") and line.strip("| ").split()[:1] == ["ID"]:
            continue  # the header's second line
        match = _ROW.match(line)
        if match is None:
            raise ParseError(
                f"{source}: line {number} is not a GPU instance: {line!r}",
                fix="pass the output of `nvidia-smi mig -lgi`",
            )
        seen_table = True
        size = int(match["size"])
        if not 1 <= size <= 255 or int(match["gi"]) > 255 or int(match["start"]) > 255:
            raise ParseError(f"{source}: line {number} places an instance outside any GPU: {line!r}")
        out.setdefault(int(match["gpu"]), []).append(
            MigInfo(profile=match["profile"], gi_id=int(match["gi"]), start=int(match["start"]), size=size)
        )
    if not seen_table and text.strip() and not any(n in text for n in _NONE):
        raise ParseError(f"{source}: no GPU-instance table", fix="pass the output of `nvidia-smi mig -lgi`")
    return {gpu: sorted(found, key=lambda m: (m.start, m.gi_id)) for gpu, found in sorted(out.items())}


_GI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<profile>\S+)\s+(?P<profile_id>\d+)\s+(?P<gi>\d+)"
    r"(?:\s+(?P<start>\d+):(?P<size>\d+))?\s*\|$"
)
_CI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+(?P<profile>\S+)\s+(?P<profile_id>\d+)\s+(?P<ci>\d+)"
    r"(?:\s+(?P<start>\d+):(?P<size>\d+))?\s*\|$"
)
_TABLE_TITLE = re.compile(r"^\|\s*(?P<what>GPU|Compute) instances:\s*\|$")
# nvidia-smi's own lines in place of a table (nvidia-smi 450-580), and what each says is configured
NO_MIG = "No MIG-enabled devices found"
NO_GI = "No GPU instances found"
NO_CI = "No compute instances found"


@dataclass(frozen=True, slots=True)
class GpuInstance:
    profile: str  # `3g.40gb`
    profile_id: int
    gi_id: int
    start: int
    size: int


@dataclass(frozen=True, slots=True)
class ComputeInstance:
    gpu: int
    gi_id: int
    profile: str  # `1g.5gb`, `1c.2g.10gb`
    profile_id: int
    ci_id: int
    start: int | None = None
    size: int | None = None


@dataclass
class MigListing:
    """What `nvidia-smi mig -lgi` / `-lci` listed. `gpu_instances` / `compute_instances` are None when their table
    (or the line saying there are none) is not in the text."""

    gpu_instances: dict[int, list[GpuInstance]] | None = None
    compute_instances: list[ComputeInstance] | None = None
    mig_off: bool = False  # `No MIG-enabled devices found.`
    errors: list[str] = field(default_factory=list)  # a line nvidia-smi printed instead of a listing
    problems: list[str] = field(default_factory=list)


def parse_mig_listing(text: str, source: str = "nvidia-smi mig", strict: bool = True) -> MigListing:
    """Both listings from one text; a table row that reads as neither is an error (a problem when not strict)."""
    listing = MigListing()
    table: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("+", "|=")):
            continue
        if NO_MIG in line:
            listing.mig_off = True
            continue
        if NO_GI in line:
            listing.gpu_instances = listing.gpu_instances or {}
            continue
        if NO_CI in line:
            listing.compute_instances = listing.compute_instances or []
            continue
        title = _TABLE_TITLE.match(line)
        if title is not None:
            table = title["what"]
            if table == "GPU":
                listing.gpu_instances = listing.gpu_instances or {}
            else:
                listing.compute_instances = listing.compute_instances or []
            continue
        if not line.startswith("|"):
            if line.startswith(("$", "#")) or re.search(r"[$#%]\s*(?:sudo\s+)?nvidia-smi\b", line):
                continue  # the command, echoed or behind its prompt
            if re.match(r"^(?:Failed|Unable|Insufficient|Option|NVIDIA-SMI has failed|No devices)", line):
                listing.errors.append(line)
            elif strict:
                raise ParseError(f"{source}: line {number} is not nvidia-smi mig output: {line[:80]!r}")
            else:
                listing.problems.append(f"{source}:{number}: not nvidia-smi mig output: {line[:80]!r}")
            continue
        gi_row, ci_row = _GI_ROW.match(line), _CI_ROW.match(line)
        if gi_row is not None and table != "Compute":
            start, size = int(gi_row["start"] or 0), int(gi_row["size"] or 1)
            if listing.gpu_instances is None:
                listing.gpu_instances = {}
            listing.gpu_instances.setdefault(int(gi_row["gpu"]), []).append(
                GpuInstance(gi_row["profile"], int(gi_row["profile_id"]), int(gi_row["gi"]), start, size)
            )  # fmt: skip
        elif ci_row is not None and table != "GPU":
            if listing.compute_instances is None:
                listing.compute_instances = []
            listing.compute_instances.append(
                ComputeInstance(
                    int(ci_row["gpu"]), int(ci_row["gi"]), ci_row["profile"], int(ci_row["profile_id"]),
                    int(ci_row["ci"]), int(ci_row["start"]) if ci_row["start"] else None,
                    int(ci_row["size"]) if ci_row["size"] else None,
                )
            )  # fmt: skip
        elif line.strip("| ").split()[:1] in (["GPU"], ["ID"], ["Instance"]):
            continue  # a header line
        elif strict:
            raise ParseError(f"{source}: line {number} is not a GPU or compute instance: {line[:80]!r}")
        else:
            listing.problems.append(f"{source}:{number}: not a GPU or compute instance: {line[:80]!r}")
    nothing = listing.gpu_instances is None and listing.compute_instances is None and not listing.mig_off
    if nothing and not listing.errors:
        raise ParseError(f"{source}: no MIG listing", fix="pass `nvidia-smi mig -lgi` or `nvidia-smi mig -lci`")
    return listing
