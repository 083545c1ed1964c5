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
"""

from __future__ import annotations

import re

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
