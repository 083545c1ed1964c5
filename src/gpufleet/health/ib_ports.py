"""Judging one InfiniBand port from what the diagnostic tools print about it: its logical and physical state, its
link width and speed against what it could run at, and its PMA error counters against thresholds.

Pure: values in, issues out, so every reader of ibstat, ibstatus, perfquery, ibqueryerrors, iblinkinfo and
ibnetdiscover output (and a fabric view) judges a port alike.

- State: `Active`/`LinkUp` is up. `Down` with a physical `LinkUp` is a subnet manager or configuration problem,
  `Down` with `Polling` (or `Sleep`) is no link at all, `Disabled` was switched off, and `Init`/`Armed` means the
  subnet manager has not finished with the port: none of these carries traffic.
- Width and speed: a link below what both ends support (iblinkinfo's "Could be ..." hint), at 1X when nothing says
  1X is all it can do, or below its sibling ports, is degraded.
- Counters: each against its catalog threshold (infiniband-diags' error_thresholds) and severity; symbol errors
  against a bit error rate when the time the counters cover and the link's rate are known, by health.symbol_errors
  (the judgement the agent and the fabric service make of them). A 4/8/16/32-bit PortCounters value at its
  maximum is saturated: the true count is at least that, and the issue says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from gpufleet.catalog.ib_counters import IbCounter, ib_counter_name, load_ib_counters
from gpufleet.health.symbol_errors import SYMBOL_COUNTER, SymbolErrorBudget, span_text
from gpufleet.model import Severity

# Link speed per lane: what libibmad prints (signalling, "53.125 Gbps") and what sysfs `rate` and ibstat count
# (data, "200 Gb/sec (4X HDR)"). Sources: rdma-core libibmad/dump.c mad_dump_linkspeed*, libibnetdisc/ibnetdisc.c
# ibnd_dump_agg_linkspeedext, infiniband-diags/ibnetdiscover.c dump_linkspeed*_compat, Linux
# drivers/infiniband/core/sysfs.c rate_show.
SPEEDS: dict[str, tuple[float, float]] = {  # generation -> (signalling Gbps per lane, data Gb/s per lane)
    "SDR": (2.5, 2.5),
    "DDR": (5.0, 5.0),
    "QDR": (10.0, 10.0),
    "FDR10": (10.3125, 10.0),
    "FDR": (14.0625, 14.0),
    "EDR": (25.78125, 25.0),
    "HDR": (53.125, 50.0),
    "NDR": (106.25, 100.0),
    "XDR": (212.5, 200.0),
}
_SPEED_ORDER = tuple(SPEEDS)
_BY_SIGNALLING = {signalling: gen for gen, (signalling, _) in SPEEDS.items() if gen != "FDR10"}

# PortState (libibmad mad_dump_portstate, ibstat port_state_str, sysfs state_show) -> one spelling
_STATES = {
    "down": "Down",
    "init": "Init",
    "initialize": "Init",
    "initializing": "Init",
    "initialized": "Init",
    "armed": "Armed",
    "active": "Active",
    "active_defer": "ActiveDefer",
    "nop": "NoChange",
    "nochange": "NoChange",
    "no state change": "NoChange",
}
_STATE_CODES = {0: "NoChange", 1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "ActiveDefer"}
_PHYS_STATES = {
    "sleep": "Sleep",
    "polling": "Polling",
    "disabled": "Disabled",
    "portconfigurationtraining": "PortConfigurationTraining",
    "linkup": "LinkUp",
    "linkerrorrecovery": "LinkErrorRecovery",
    "phytest": "PhyTest",
    "phy test": "PhyTest",
    "nochange": "NoChange",
    "no state change": "NoChange",
}
_PHYS_CODES = {
    0: "NoChange",
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "PhyTest",
}
_CODED = re.compile(r"^(?P<code>\d{1,3})\s*:\s*(?P<name>.*)$")
_LANES = re.compile(r"^(?P<lanes>1|2|4|8|12)\s*[xX]$")
_SIGNALLING = re.compile(r"(?P<gbps>\d+(?:\.\d+)?)\s*Gb(?:p)?s\b")
_GEN = re.compile(r"\b(?P<gen>FDR10|SDR|DDR|QDR|FDR|EDR|HDR|NDR|XDR)\b")
_COULD_BE = re.compile(r"Could be\s+(?P<what>\d+X|FDR10|[\d.]+\s*Gbps)")


@dataclass(frozen=True, slots=True)
class PortIssue:
    """One thing wrong (or worth knowing) about a port."""

    check: str  # ib-port-state, ib-link-width, ib-link-speed, ib-counter
    severity: Severity
    code: str  # "Down/Polling", "1X", a counter name
    message: str
    fix: str = ""


@dataclass(slots=True)
class PortReading:
    """What one tool showed about a port. None: the tool did not show it."""

    state: str | None = None  # as printed: "Active", "ACTIVE", "4: ACTIVE", "Initialize", ...
    phys_state: str | None = None  # "LinkUp", "5: LinkUp", "Polling", ...
    link_layer: str | None = None  # InfiniBand, IB, Ethernet
    width: int | None = None  # active lanes
    speed: str | None = None  # generation: SDR ... XDR, FDR10
    rate_gbps: float | None = None  # data rate as sysfs and ibstat count it (400 for 4X NDR)
    could_be: str | None = None  # iblinkinfo's hint ("Could be 12X Could be 53.125 Gbps"); "" = it had none
    expected_width: int | None = None  # what comparable ports run at (sibling ports of the same HCA model)
    expected_rate_gbps: float | None = None
    peer_expected: bool = True  # False for a switch port nothing says should be cabled
    counters: Mapping[str, int] = field(default_factory=dict)  # any name infiniband-diags printed
    extended: bool = False  # 64-bit PortCountersExtended values: no saturation
    window_s: float | None = None  # the time the counters cover; None: since they were last cleared, unknown


def normalise_state(text: str | None) -> str | None:
    """Down, Init, Armed, Active, ActiveDefer or NoChange from any spelling the tools print; None if unreadable."""
    if text is None:
        return None
    value = text.strip()
    coded = _CODED.match(value)
    if coded is not None:
        name = _STATES.get(coded.group("name").strip().lower())
        return name or _STATE_CODES.get(int(coded.group("code")))
    return _STATES.get(value.lower())


def normalise_phys_state(text: str | None) -> str | None:
    """The physical port state (LinkUp, Polling, Disabled, ...) from any spelling; None if unreadable."""
    if text is None:
        return None
    value = text.strip()
    coded = _CODED.match(value)
    if coded is not None:
        name = _PHYS_STATES.get(coded.group("name").strip().lower())
        return name or _PHYS_CODES.get(int(coded.group("code")))
    return _PHYS_STATES.get(value.lower())


def lane_count(text: str | None) -> int | None:
    """1, 2, 4, 8 or 12 from "4X", "4x", "1X"; None for "??", "undefined (3)" and the like."""
    if text is None:
        return None
    match = _LANES.match(text.strip())
    return int(match.group("lanes")) if match else None


def speed_generation(text: str | None) -> str | None:
    """The speed generation (SDR ... XDR, FDR10) from how a tool prints it: "HDR", "53.125 Gbps",
    "10.0 Gbps (FDR10)", "2.5 Gbs" (libibmad before 1.2), "200 Gb/sec (4X HDR)" (sysfs)."""
    if text is None:
        return None
    gen = _GEN.search(text)
    if gen is not None:
        return gen.group("gen")
    signalling = _SIGNALLING.search(text)
    if signalling is None:
        return None
    try:
        return _BY_SIGNALLING.get(float(signalling.group("gbps")))
    except ValueError:
        return None


def link_rate_gbps(width: int | None, speed: str | None) -> float | None:
    """The data rate of a link, as sysfs counts it (4X HDR: 200)."""
    if width is None or speed not in SPEEDS:
        return None
    return width * SPEEDS[speed][1]


def speed_rank(speed: str | None) -> int | None:
    return _SPEED_ORDER.index(speed) if speed in SPEEDS else None


@cache
def _default_budget() -> SymbolErrorBudget:
    return SymbolErrorBudget()


# -- state ---------------------------------------------------------------------------------------------------
_NO_LINK_FIX = (
    "check the cable and transceiver at both ends and that the far end is powered and its port enabled; reseat or "
    "replace what is bad"
)
_SM_FIX = (
    "check the subnet manager: is one running and can it reach this port (`sminfo`, the opensm or UFM log)? "
    "a port not yet Active carries no traffic"
)


def judge_state(state: str | None, phys_state: str | None, *, peer_expected: bool = True) -> list[PortIssue]:
    """What the port's logical and physical state say. `peer_expected=False` (a switch port nothing says should
    be cabled) makes a port without link a note, not a fault."""
    logical, physical = normalise_state(state), normalise_phys_state(phys_state)
    shown = f"{state.strip() if state else '?'}/{phys_state.strip() if phys_state else '?'}"
    code = f"{logical or state or '?'}/{physical or phys_state or '?'}"
    if logical is None and physical is None:
        if state is None and phys_state is None:
            return []
        return [PortIssue("ib-port-state", Severity.info, code, f"port state {shown} cannot be read")]
    if logical == "Active":
        if physical in (None, "LinkUp"):
            return []
        return [
            PortIssue(
                "ib-port-state",
                Severity.warning,
                code,
                f"port Active but its physical state is {physical}: the link is retraining or unstable",
                "watch the link's error counters (`perfquery`); reseat or replace the cable if it recurs",
            )
        ]
    if logical in ("Init", "Armed"):
        return [
            PortIssue(
                "ib-port-state",
                Severity.critical,
                code,
                f"port {logical} ({shown}): the subnet manager has not finished bringing it up",
                _SM_FIX,
            )
        ]
    if logical == "Down" or (logical is None and physical not in (None, "LinkUp")):
        return _judge_down(physical, shown, code, peer_expected)
    return [PortIssue("ib-port-state", Severity.info, code, f"port state {shown}")]


def _judge_down(physical: str | None, shown: str, code: str, peer_expected: bool) -> list[PortIssue]:
    if physical == "LinkUp":
        return [
            PortIssue(
                "ib-port-state",
                Severity.critical,
                code,
                f"port {shown}: the physical link is up but the port is logically down (subnet manager or "
                "port configuration)",
                _SM_FIX + "; check the port's configuration (`ibportstate <lid> <port> query`)",
            )
        ]
    if physical == "Disabled":
        return [
            PortIssue(
                "ib-port-state",
                Severity.critical if peer_expected else Severity.warning,
                code,
                f"port {shown}: switched off (by an operator, or by the fabric manager isolating a bad link)",
                "find out why it was disabled; once the cause is fixed enable it (`ibportstate <lid> <port> enable`)",
            )
        ]
    if physical in ("PortConfigurationTraining", "LinkErrorRecovery"):
        return [
            PortIssue(
                "ib-port-state",
                Severity.critical,
                code,
                f"port {shown}: the link is trying to come up but has not trained",
                _NO_LINK_FIX,
            )
        ]
    if physical == "PhyTest":
        return [
            PortIssue(
                "ib-port-state",
                Severity.warning,
                code,
                f"port {shown}: in physical test mode",
                "take the port out of test mode",
            )
        ]
    if not peer_expected:
        return [PortIssue("ib-port-state", Severity.info, code, f"port {shown}: no link (an unused port?)")]
    return [
        PortIssue(
            "ib-port-state",
            Severity.critical,
            code,
            f"port {shown}: no link (no signal from a far end)",
            _NO_LINK_FIX,
        )
    ]


# -- width and speed -----------------------------------------------------------------------------------------
_LINK_FIX = (
    "reseat or replace the cable or transceiver (a bad lane trains the link down); check both ends' enabled "
    "widths and speeds and their firmware"
)


def judge_link(
    width: int | None,
    speed: str | None,
    *,
    could_be: str | None = None,
    expected_width: int | None = None,
    expected_rate_gbps: float | None = None,
    rate_gbps: float | None = None,
) -> list[PortIssue]:
    """Width and speed of an active link. `could_be` is iblinkinfo's hint (None: no such hint was available)."""
    out: list[PortIssue] = []
    running = " ".join(p for p in (f"{width}X" if width else "", speed or "") if p) or "an unknown width and speed"
    hints = _COULD_BE.findall(could_be or "")
    if hints:
        better = ", ".join(hints)
        out.append(
            PortIssue(
                "ib-link-speed" if not any(h.endswith("X") for h in hints) else "ib-link-width",
                Severity.warning,
                f"could be {better}",
                f"link runs at {running} while both ends support {better}",
                _LINK_FIX,
            )
        )
    elif could_be is None and width == 1:
        out.append(
            PortIssue(
                "ib-link-width",
                Severity.warning,
                "1X",
                f"link trained at 1X ({running}): one lane of a multi-lane link, most likely a bad lane",
                _LINK_FIX,
            )
        )
    if not hints and expected_width is not None and width is not None and width < expected_width:
        out.append(
            PortIssue(
                "ib-link-width",
                Severity.warning,
                f"{width}X",
                f"link at {width}X while comparable ports run at {expected_width}X",
                _LINK_FIX,
            )
        )
    rate = rate_gbps if rate_gbps is not None else link_rate_gbps(width, speed)
    if not hints and expected_rate_gbps is not None and rate is not None and rate < expected_rate_gbps:
        out.append(
            PortIssue(
                "ib-link-speed",
                Severity.warning,
                f"{rate:g} Gb/s",
                f"link at {rate:g} Gb/s while comparable ports run at {expected_rate_gbps:g} Gb/s",
                _LINK_FIX,
            )
        )
    return out


# -- counters ------------------------------------------------------------------------------------------------
def _worse(a: Severity, b: Severity) -> Severity:
    return a if a.rank >= b.rank else b


def _count(value: int, saturated: bool, bits: int) -> str:
    if saturated:
        return f"at least {value} (the {bits}-bit counter is saturated: the true count is hidden)"
    return str(value)


def judge_counter(
    name: str,
    value: int,
    *,
    extended: bool = False,
    window_s: float | None = None,
    rate_gbps: float | None = None,
    budget: SymbolErrorBudget | None = None,
) -> PortIssue | None:
    """One counter's value judged; None when it is zero, a traffic counter with nothing to say, or not one the
    catalog describes."""
    pma = ib_counter_name(name)
    if pma is None or value <= 0:
        return None
    info = load_ib_counters()[pma]
    bits = info.extended_bits if extended else info.bits
    saturated = not extended and value >= info.saturation
    shown = name if name == pma else f"{name} ({pma})"
    count = _count(value, saturated, bits)
    if info.threshold is None:  # traffic: only worth a note when the 32-bit counter has stopped counting
        if not saturated:
            return None
        return PortIssue(
            "ib-counter",
            Severity.info,
            pma,
            f"{shown} {count}",
            "read the 64-bit counters (`perfquery -x`) for traffic",
        )
    severity, message = _threshold_verdict(info, value, count, shown, window_s, rate_gbps, budget)
    if saturated:
        severity = _worse(severity, Severity.warning)
    return PortIssue("ib-counter", severity, pma, message, _counter_fix(info, saturated))


def _threshold_verdict(
    info: IbCounter,
    value: int,
    count: str,
    shown: str,
    window_s: float | None,
    rate_gbps: float | None,
    budget: SymbolErrorBudget | None,
) -> tuple[Severity, str]:
    threshold = info.threshold or 0
    if info.name == SYMBOL_COUNTER:
        return _symbol_verdict(info, value, count, shown, window_s, rate_gbps, budget or _default_budget())
    if info.name == "LinkDownedCounter" and window_s and window_s > 0:
        span = f"{window_s / 60:.0f} min" if window_s >= 120 else f"{window_s:g} s"
        return Severity.critical, f"{shown} {count}: the link went down in the last {span}"
    if value > threshold and info.over_threshold:
        return Severity(info.over_threshold), _over_threshold(info, count, shown, window_s)
    return Severity.info, f"{shown} {count} (threshold {threshold})"


def _over_threshold(info: IbCounter, count: str, shown: str, window_s: float | None) -> str:
    return f"{shown} {count}, over the threshold of {info.threshold or 0} ({info.description.lower()})" + (
        " - counted since the counters were last cleared, so no error rate can be told" if not window_s else ""
    )


def _symbol_verdict(
    info: IbCounter,
    value: int,
    count: str,
    shown: str,
    window_s: float | None,
    rate_gbps: float | None,
    budget: SymbolErrorBudget,
) -> tuple[Severity, str]:
    """Symbol errors by health.symbol_errors: against a bit error rate when the time the count covers and the link's
    rate are known, else against infiniband-diags' threshold."""
    timed = bool(window_s and window_s > 0 and rate_gbps and rate_gbps > 0)
    verdict = budget.judge_reading(value, window_s or 0.0, rate_gbps if timed else None)
    if timed and window_s:
        if verdict is not None:
            return verdict.severity, f"{shown} {count}: {verdict.describe()}"
        return Severity.info, (
            f"{shown} {count} in {span_text(window_s)}: within the bit error rate budget ({budget.targets()})"
        )
    if verdict is not None:
        return verdict.severity, _over_threshold(info, count, shown, window_s)
    return Severity.info, f"{shown} {count} (threshold {info.threshold or 0})"


def _counter_fix(info: IbCounter, saturated: bool) -> str:
    fix = info.fix
    if saturated:
        fix = (fix + "; " if fix else "") + "clear the counters (`perfquery -R <lid> <port>`) to see the true rate"
    return fix


def judge_counters(
    counters: Mapping[str, int],
    *,
    extended: bool = False,
    window_s: float | None = None,
    rate_gbps: float | None = None,
    budget: SymbolErrorBudget | None = None,
) -> list[PortIssue]:
    """Each counter judged; a name printed twice (old and new spelling) counts once, with its larger value."""
    merged: dict[str, tuple[str, int]] = {}
    for name, value in counters.items():
        pma = ib_counter_name(name)
        if pma is None:
            continue
        if pma not in merged or value > merged[pma][1]:
            merged[pma] = (name, value)
    out: list[PortIssue] = []
    for name, value in merged.values():
        issue = judge_counter(name, value, extended=extended, window_s=window_s, rate_gbps=rate_gbps, budget=budget)
        if issue is not None:
            out.append(issue)
    return out


def judge_port(reading: PortReading, *, budget: SymbolErrorBudget | None = None) -> list[PortIssue]:
    """Everything the reading shows about the port, worst first."""
    out = judge_state(reading.state, reading.phys_state, peer_expected=reading.peer_expected)
    logical = normalise_state(reading.state)
    if logical in (None, "Active") and not any(i.severity is Severity.critical for i in out):
        out += judge_link(
            reading.width,
            reading.speed,
            could_be=reading.could_be,
            expected_width=reading.expected_width,
            expected_rate_gbps=reading.expected_rate_gbps,
            rate_gbps=reading.rate_gbps,
        )
    rate = reading.rate_gbps if reading.rate_gbps is not None else link_rate_gbps(reading.width, reading.speed)
    out += judge_counters(
        reading.counters, extended=reading.extended, window_s=reading.window_s, rate_gbps=rate, budget=budget
    )
    return sorted(out, key=lambda i: -i.severity.rank)


def worst(issues: list[PortIssue]) -> Severity | None:
    """The most severe issue's severity, or None for no issues."""
    return Severity.worst(i.severity for i in issues)


def describe_port(
    *,
    node: str | None = None,
    guid: str | None = None,
    lid: int | None = None,
    port: int | None = None,
    device: str | None = None,
) -> str:
    """How a finding names a port: `"leaf1" port 35 (GUID 0x200002, LID 4)`, `mlx5_0 port 1 (GUID ..., LID 5)`."""
    head = " ".join(p for p in (f'"{node}"' if node else "", device or "") if p)
    where = f"port {port}" if port is not None else ""
    ids = ", ".join(p for p in (f"GUID {guid}" if guid else "", f"LID {lid}" if lid is not None else "") if p)
    text = " ".join(p for p in (head, where) if p) or "port"
    return f"{text} ({ids})" if ids else text
