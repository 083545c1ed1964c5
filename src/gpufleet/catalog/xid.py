"""Xid facts: the catalog (xid_catalog.csv: NVIDIA's resolution buckets and what peer tools do with each code), the
root cause a code names (xid_causes.yaml), and the message text the driver prints with it (xid_messages.yaml)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache

import yaml
from pydantic import BaseModel, ConfigDict

from gpufleet.catalog._files import read_text


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    mnemonic: str
    description: str
    nvidia_immediate_action: str
    nvidia_investigatory_action: str
    nvsentinel_action: str
    nvsentinel_fatality: str
    dcgm_healthwatch: str
    gcm_class: str
    device_plugin: str
    exporter_text: str

    @property
    def fatal(self) -> bool:
        return self.nvsentinel_fatality == "FATAL"


@cache
def load_xid_catalog() -> dict[int, XidInfo]:
    catalog: dict[int, XidInfo] = {}
    for row in csv.DictReader(io.StringIO(read_text("xid_catalog.csv"))):
        code = int(row["code"])
        catalog[code] = XidInfo(
            code=code,
            mnemonic=row["mnemonic"],
            description=row["description"],
            nvidia_immediate_action=row["nvidia_immediate_action"],
            nvidia_investigatory_action=row["nvidia_investigatory_action"],
            nvsentinel_action=row["nvsentinel_action"],
            nvsentinel_fatality=row["nvsentinel_fatality"],
            dcgm_healthwatch=row["dcgm_healthwatch"],
            gcm_class=row["gcm_class"],
            device_plugin=row["k8s_device_plugin"],
            exporter_text=row["dcgm_exporter_text"],
        )
    return catalog


@cache
def xid_causes() -> dict[int, str]:
    """The root cause (a RootCause value) each listed code names; others are a generic GPU Xid."""
    return {int(k): str(v) for k, v in yaml.safe_load(read_text("xid_causes.yaml")).items()}


@cache
def xid_messages() -> dict[int, str]:
    """What the driver prints after `NVRM: Xid (PCI:...): N, pid=..., name=..., ` for the codes seen in real logs."""
    return {int(k): str(v) for k, v in yaml.safe_load(read_text("xid_messages.yaml")).items()}


def xid_message(code: int) -> str:
    """The driver's text for `code`: a real one where known, else the catalog's description."""
    message = xid_messages().get(code)
    if message is not None:
        return message
    info = load_xid_catalog().get(code)
    return info.description if info else "Unknown error"


class Nvl5Rule(BaseModel):
    """One row of NVIDIA's XID 144-150 decode table."""

    model_config = ConfigDict(frozen=True)

    xid: int
    unit: str
    intrinfo_pattern_v1: str
    intrinfo_pattern_v2: str
    error_status: int
    resolution: str
    investigatory: str
    severity: str
    action2: str
    hw_sw: str
    effect: str

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(self.unit.split("/"))

    @property
    def fatal(self) -> bool:
        return not self.severity.lower().startswith("non")

    def matches_intrinfo(self, intrinfo: int) -> bool:
        return _bits_match(self.intrinfo_pattern_v1, intrinfo) or _bits_match(self.intrinfo_pattern_v2, intrinfo)


def _bits_match(pattern: str, value: int) -> bool:
    """`------000000----------0011000010`: most significant bit first, '-' matches anything."""
    width = len(pattern)
    for i, ch in enumerate(pattern):
        if ch == "-":
            continue
        if ((value >> (width - 1 - i)) & 1) != int(ch):
            return False
    return True


@cache
def load_nvl5_decode() -> tuple[Nvl5Rule, ...]:
    """NVIDIA's decode table for Xid 144-150 (NVLink5): which unit and bit pattern mean what, and what to do."""
    rows = csv.DictReader(io.StringIO(read_text("nvl5_decode.csv")))
    return tuple(Nvl5Rule(**{**row, "error_status": int(row["error_status"], 16)}) for row in rows)
