"""The node's BMC through ipmitool, in band (/dev/ipmi0): its sensors (`ipmitool sdr elist`) and its System Event Log
(`ipmitool sel elist`), each run under a timeout and read by parsers/bmc/ipmitool.py. The agent reads it in a thread
of its own (agent/bmc.py), every --bmc-interval.

No ipmitool, no /dev/ipmi0, no permission, a BMC that does not answer in time: `BmcUnavailable` with the reason and
its fix, never a traceback.

Which SEL records are new: how far the SEL was read is kept as the last record's id and line (`position`); the
records after it are new. The stored record missing, or its id holding another line, means the SEL was cleared since:
all of it is new. No stored position (a first start): none is (`new_entries` says None).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from gpufleet.errors import GpufleetError
from gpufleet.model.bmc import BmcSensor, SelEntry
from gpufleet.parsers.bmc.ipmitool import parse_sdr, parse_sel

DEFAULT_TIMEOUT_S = 30.0
_NO_DEVICE_FIX = (
    "load the IPMI drivers (modprobe ipmi_devintf ipmi_si) on a node with a BMC; in a container, pass /dev/ipmi0 "
    "through; or run the agent with --no-bmc"
)


class BmcUnavailable(GpufleetError):
    """ipmitool is missing, cannot reach the BMC, failed, or did not answer in time."""


@dataclass
class IpmiTool:
    """ipmitool on this host, each command under `timeout_s`."""

    binary: str = "ipmitool"
    timeout_s: float = DEFAULT_TIMEOUT_S
    env: dict[str, str] | None = None

    def run(self, *args: str) -> tuple[str, str]:
        """(stdout, stderr) of `ipmitool ARGS`; BmcUnavailable with the reason when it cannot answer."""
        path = shutil.which(self.binary, path=(self.env or {}).get("PATH"))
        if path is None:
            raise BmcUnavailable(f"{self.binary} is not installed", fix="install ipmitool, or run with --no-bmc")
        argv = [path, *args]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, errors="replace", timeout=self.timeout_s, env=self.env,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise BmcUnavailable(
                f"`ipmitool {' '.join(args)}` did not finish in {self.timeout_s:g} s and was stopped",
                fix="the BMC is slow or hung: check it (`ipmitool mc info`); a larger --bmc-timeout may help",
            ) from None
        except OSError as exc:
            raise BmcUnavailable(f"cannot run {self.binary}: {exc}", fix="check the ipmitool installation") from None
        if done.returncode != 0:
            detail = (done.stderr.strip() or done.stdout.strip()).splitlines()
            why = detail[-1][:200] if detail else "no output"
            fix = _NO_DEVICE_FIX if "Could not open device" in why or "/dev/ipmi" in why else "run the command by hand"
            if "Permission denied" in why:
                fix = "run the agent as root, or give its user read-write access to /dev/ipmi0"
            raise BmcUnavailable(f"`ipmitool {' '.join(args)}` failed (exit {done.returncode}): {why}", fix=fix)
        return done.stdout, done.stderr


def position(entry: SelEntry) -> str:
    """How far the SEL was read, as kept: the record's id and its line."""
    return f"{entry.record:x} {entry.raw.strip()}"


def new_entries(entries: list[SelEntry], stored: str | None) -> list[SelEntry] | None:
    """The records after the stored one, in the SEL's order; None on a first read (no stored position). The stored
    record missing, or its id holding another line, means the SEL was cleared: all of it is new."""
    if stored is None:
        return None
    record_text, _, line = stored.partition(" ")
    for i, entry in enumerate(entries):
        if f"{entry.record:x}" == record_text:
            return entries[i + 1 :] if entry.raw.strip() == line else list(entries)
    return list(entries)


def read_bmc(tool: IpmiTool) -> tuple[tuple[BmcSensor, ...], list[SelEntry]]:
    """Every sensor (`sdr elist`) and every SEL record (`sel elist`; an empty SEL prints nothing on stdout)."""
    stdout, _ = tool.run("sdr", "elist")
    sensors = tuple(parse_sdr(stdout, source="ipmitool sdr elist").sensors)
    stdout, _ = tool.run("sel", "elist")
    entries = parse_sel(stdout, source="ipmitool sel elist").entries if stdout.strip() else []
    return sensors, entries
