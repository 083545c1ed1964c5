"""GPU detectors over the telemetry stream (dcgm-exporter's fields in a MetricFrame), vectorized over GPUs.

- ECC: single-bit errors above DCGM's rate; and the memory-health fields (a new volatile double-bit error, a row-remap
  failure, uncorrectable remapped rows over the limit, retired pages over DCGM's limits or over the soft limit while
  one is pending) judged by health.gpu_memory, the judgement triage gives the same values in one reading.
- Thermal: hardware thermal slowdown held for a while with the SM clock really down. Power capping (the software
  power-cap reason, a cool GPU) is normal operation and never an incident.
- Power brake: the hardware power-brake reason held for a few seconds.
- PCIe: replays above DCGM's per-lane budget for the link's generation and width, or a link running below its
  maximum generation or width.
- NVLink: CRC or recovery errors growing faster than DCGM's limit, naming the links whose errors climb where the
  per-link counters are read (health.nvlink.climbing_links).
- GPU state NVML reports each collection: the driver's recovery action (judged as the Xid 154 announcing it, by
  health.xid_policy.recovery_state_verdict: the finding carries NVIDIA's action and remediation follows it, runbook
  xid-154-recovery-action), and a GPU not in its NVLink domain (health.nvlink.judge_fabric).
- Idle: a GPU some workload holds that stays under the utilization floor (what it costs per hour goes along).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpufleet.health.detectors.base import NodeSetup, node_detector
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.health.detectors.window import CounterWindow, HoldTimer
from gpufleet.health.gpu_memory import MemoryReading, judge_memory
from gpufleet.health.nvlink import (
    FABRIC_HOLD_S,
    FM_IN_PROGRESS,
    FM_NOT_STARTED,
    climbing_links,
    judge_fabric,
    links_named,
)
from gpufleet.health.thresholds import Thresholds
from gpufleet.health.xid_policy import recovery_state_verdict
from gpufleet.health.xid_rating import finding_severity
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding
from gpufleet.telemetry.fields import IDLE_COST_FIELD
from gpufleet.telemetry.frame import MetricFrame

HW_THERMAL = 0x40
_LARGEST = np.finfo(np.float64).max
HW_POWER_BRAKE = 0x80


def _zeroed(values: np.ndarray) -> np.ndarray:
    """np.nan_to_num's answer (NaN 0, an infinity the largest finite float) by two ufuncs, without its checks: the
    agents take it many times a collection."""
    out = np.where(np.isnan(values), 0.0, values)
    np.minimum(out, _LARGEST, out=out)
    return np.maximum(out, -_LARGEST, out=out)


def _row_medians(grid: np.ndarray) -> np.ndarray:
    """Each row's median with NaN ignored (NaN for a row of NaN): np.nanmedian's answer, by one sort (NaN sorts
    last) instead of its masked arrays, as the agents run it on every collection."""
    ordered = np.sort(grid, axis=1)
    count = (~np.isnan(grid)).sum(axis=1)
    rows = np.arange(grid.shape[0])
    low, high = ordered[rows, np.maximum(count - 1, 0) // 2], ordered[rows, count // 2 - (count == 0)]
    return np.where(count > 0, (low + high) / 2.0, np.nan)


def _throttled(held: float, window: float) -> str:
    """The throttling seen: a continuous hold longer than the window, or the time within it."""
    if held > window:
        return f"thermally throttled for the last {held:.0f} s"
    return f"thermally throttled {held:.0f} s of the last {window:.0f} s"


@node_detector("gpu", needs=("frame",))
class GpuDetectors:
    def __init__(self, frame: MetricFrame, thresholds: Thresholds) -> None:
        self.t = thresholds
        n = len(frame.entities)
        self.entities = [Entity(EntityKind.gpu, e.hostname, e.gpu) for e in frame.entities]
        self.max_clock = np.full(n, np.nan)
        self.thermal = HoldTimer(n)
        self.hot_idle = HoldTimer(n)
        hosts = {h: k for k, h in enumerate(dict.fromkeys(e.hostname for e in frame.entities))}
        self.node_of = np.array([hosts[e.hostname] for e in frame.entities], dtype=np.int64)
        counts = np.bincount(self.node_of) if n else np.zeros(0, dtype=np.int64)
        contiguous = bool(n) and bool((np.diff(self.node_of) >= 0).all()) and len(set(counts.tolist())) == 1
        self._rows = (len(counts), int(counts[0])) if contiguous else None
        self.brake = HoldTimer(n)
        self.idle = HoldTimer(n)
        self.sbe = CounterWindow(60.0)
        self.thermal_violation = CounterWindow(thresholds.thermal.window_s)
        self.pcie = CounterWindow(thresholds.pcie.window_s)
        # NVLink's flit CRC, data CRC and recovery totals per GPU, then (where the frame carries them) the same three
        # per link (entities x links, flattened: which link's errors climb), end to end in one window: every counter
        # is windowed apart (a reading missed in one is not a reset of a sum), in one pass a collection
        self.nvlink = CounterWindow(thresholds.nvlink.window_s)
        self.fabric_pending = HoldTimer(n)
        self.last_dbe = np.zeros(n)
        self.uuids = [e.uuid for e in frame.entities]

    @classmethod
    def build(cls, setup: NodeSetup) -> GpuDetectors:
        return cls(setup.frame, setup.thresholds)

    def latched(self) -> dict[str, float]:
        """What the detectors must remember across a restart of the agent, by GPU UUID: the uncorrectable-ECC count
        already reported (a restarted agent would report a count it had reported before as a new error)."""
        return {u: float(v) for u, v in zip(self.uuids, self.last_dbe, strict=True) if u and v > 0}

    def restore(self, latched: Mapping[str, float]) -> None:
        """Take up `latched()` as saved before a restart; GPUs not named start from zero."""
        for i, uuid in enumerate(self.uuids):
            if uuid in latched:
                self.last_dbe[i] = float(latched[uuid])

    def _finding(
        self, now: float, i: int, cause: RootCause, severity: Severity, summary: str, evidence: str, action: str = ""
    ) -> Finding:
        return Finding(now, cause, self.entities[i], severity, summary, evidence, "telemetry", action=action)

    def detect(self, now: float, seen: NodeSeen) -> list[Finding]:
        out: list[Finding] = []
        frame = seen.frame
        if frame is None:
            return out
        g = frame.gpu
        self._ecc(now, frame, out)
        clock, temp, reasons = (
            g("DCGM_FI_DEV_SM_CLOCK"),
            g("DCGM_FI_DEV_GPU_TEMP"),
            g("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
        )
        self.max_clock = np.fmax(self.max_clock, clock)
        bits = _zeroed(reasons).astype(np.int64)
        slow = clock < self.t.thermal.clock_ratio * self.max_clock
        held = self.thermal.update(now, ((bits & HW_THERMAL) != 0) & slow)
        # A GPU held at its slowdown point drops in and out of throttling every few seconds, so the continuous hold
        # can keep resetting: DCGM's thermal-violation time over a window catches that duty cycle.
        self.thermal_violation.push(now, g("DCGM_FI_DEV_THERMAL_VIOLATION"))
        violated = self.thermal_violation.growth()
        if violated is not None:
            held = np.maximum(held, np.where(violated >= self.t.thermal.hold_s * 1e9, violated / 1e9, 0.0))
        for i in np.flatnonzero(held >= self.t.thermal.hold_s):
            out.append(
                self._finding(
                    now,
                    int(i),
                    RootCause.thermal,
                    Severity.warning,
                    f"thermal slowdown on {self.entities[i]}",
                    f"GPU at {temp[i]:.0f} C, {_throttled(held[i], self.t.thermal.window_s)}; "
                    f"SM clock {clock[i]:.0f} MHz of {self.max_clock[i]:.0f}",
                    "POWER_CAP_AND_TICKET",
                )
            )
        self._hot_idle(now, frame, out)
        held = self.brake.update(now, (bits & HW_POWER_BRAKE) != 0)
        for i in np.flatnonzero(held >= self.t.power_brake.hold_s):
            out.append(
                self._finding(
                    now,
                    int(i),
                    RootCause.power_brake,
                    Severity.warning,
                    f"power brake on {self.entities[i]}",
                    f"hardware power-brake slowdown asserted for {held[i]:.0f} s; SM clock {clock[i]:.0f} MHz",
                    "CHECK_MECHANICALS",
                )
            )
        self._pcie(now, frame, out)
        self._nvlink(now, frame, out)
        self._recovery(now, frame, out)
        self._fabric(now, frame, out)
        self._idle(now, frame, out)
        return out

    def _hot_idle(self, now: float, frame: MetricFrame, out: list[Finding]) -> None:
        """An idle GPU clearly hotter than the idle GPUs beside it on its node: its cooling has failed, long
        before a load would push it into thermal slowdown. Only idle GPUs are compared, so work never looks like
        a fault; the same answer whether the frame holds one node (an agent) or many (the twin's agents)."""
        temp, util = frame.gpu("DCGM_FI_DEV_GPU_TEMP"), frame.gpu("DCGM_FI_DEV_GPU_UTIL")
        idle = util < self.t.idle.util_percent
        idle_temp = np.where(idle, temp, np.nan)
        excess = self.t.thermal.idle_excess_c
        suspect = np.zeros(len(temp), dtype=bool)
        for i in np.flatnonzero(idle & (temp > self._node_median(idle_temp) + excess)):
            peers = idle & (self.node_of == self.node_of[i])
            peers[i] = False
            if peers.any() and temp[i] > float(np.nanmedian(temp[peers])) + excess:
                suspect[i] = True
        held = self.hot_idle.update(now, suspect)
        for i in np.flatnonzero(held >= self.t.thermal.idle_hold_s):
            out.append(
                self._finding(
                    now,
                    int(i),
                    RootCause.thermal,
                    Severity.warning,
                    f"cooling fault suspected on {self.entities[i]}",
                    f"idle at {temp[i]:.0f} C, over {excess:g} C hotter than the idle GPUs "
                    f"beside it for {held[i] / 60:.0f} min",
                    "POWER_CAP_AND_TICKET",
                )
            )

    def _node_median(self, values: np.ndarray) -> np.ndarray:
        """Each entity's node's median of `values` (NaN ignored; NaN where the node has none)."""
        medians = np.full(len(values), np.nan)
        if self._rows is not None:  # every node has the same GPU count, in order: one vectorized median
            return np.repeat(_row_medians(values.reshape(self._rows)), self._rows[1])
        for node in np.unique(self.node_of):
            mine = self.node_of == node
            if not np.isnan(values[mine]).all():
                medians[mine] = np.nanmedian(values[mine])
        return medians

    def _ecc(self, now: float, frame: MetricFrame, out: list[Finding]) -> None:
        g, e = frame.gpu, self.t.ecc
        dbe = g("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")  # NaN (a missed reading) compares false: no finding, no reset
        new_dbe = np.where(dbe > self.last_dbe, dbe - self.last_dbe, 0.0)
        last_dbe = self.last_dbe
        self.last_dbe = np.where(np.isnan(dbe), self.last_dbe, dbe)  # lower after a GPU reset clears the count
        self.sbe.push(now, g("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"))
        grown = self.sbe.growth()
        if grown is not None and self.sbe.span() >= 30:
            rate = grown * 60.0 / self.sbe.span()
            for i in np.flatnonzero(rate > e.sbe_per_minute):
                out.append(
                    self._finding(
                        now,
                        int(i),
                        RootCause.ecc_sbe_rate,
                        Severity.warning,
                        f"single-bit ECC storm on {self.entities[i]}",
                        f"{rate[i]:.1f} single-bit errors a minute (DCGM limit {e.sbe_per_minute:g})",
                        # Xid 92's catalog bucket, the driver's report of the same condition: the errors were
                        # corrected (IGNORE now, CONTACT_SUPPORT to investigate); one runbook for both, ecc-sbe-rate
                        "IGNORE",
                    )
                )
        # the memory-health fields, judged by health.gpu_memory as triage judges them in one reading
        failure = _zeroed(g("DCGM_FI_DEV_ROW_REMAP_FAILURE"))
        rows = _zeroed(g("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"))
        retired = _zeroed(g("DCGM_FI_DEV_RETIRED_SBE")) + _zeroed(g("DCGM_FI_DEV_RETIRED_DBE"))
        pending = _zeroed(g("DCGM_FI_DEV_RETIRED_PENDING"))
        remap_field = "DCGM_FI_DEV_ROW_REMAP_PENDING"
        remap_pending = frame.gpu(remap_field) if frame.has_gpu_field(remap_field) else np.full(len(dbe), np.nan)
        for i in np.flatnonzero((new_dbe > 0) | (failure > 0) | (rows > 0) | (retired > 0) | (remap_pending > 0)):
            reading = MemoryReading(
                uncorrectable=float(new_dbe[i]),
                remap_failure=bool(failure[i] > 0),
                remapped_uncorrectable=float(rows[i]),
                retired_pages=float(retired[i]),
                retired_pending=bool(pending[i] > 0),
                remap_pending=None if np.isnan(remap_pending[i]) else bool(remap_pending[i] > 0),
            )
            for issue in judge_memory(reading, e):
                if not issue.filed:
                    continue
                evidence = issue.message
                if issue.cause is RootCause.ecc_dbe:
                    evidence = f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL went from {last_dbe[i]:.0f} to {dbe[i]:.0f}"
                elif issue.code == "row remap failure":
                    evidence = "DCGM_FI_DEV_ROW_REMAP_FAILURE = 1: the bad row stays in use"
                elif issue.cause is RootCause.retired_pages:
                    limits = f"{e.retired_pages_soft}/{e.retired_pages_limit}"
                    evidence += f" ({pending[i]:.0f} pending; DCGM limits {limits})"
                out.append(
                    self._finding(
                        now, int(i), issue.cause, issue.severity, f"{issue.title} on {self.entities[i]}", evidence,
                        issue.action,
                    )
                )  # fmt: skip

    def _pcie(self, now: float, frame: MetricFrame, out: list[Finding]) -> None:
        g, p = frame.gpu, self.t.pcie
        gen, width = g("DCGM_FI_DEV_PCIE_LINK_GEN"), g("DCGM_FI_DEV_PCIE_LINK_WIDTH")
        max_gen, max_width = g("DCGM_FI_DEV_PCIE_MAX_LINK_GEN"), g("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH")
        degraded = (gen < max_gen) | (width < max_width)
        for i in np.flatnonzero(degraded):
            out.append(
                self._finding(
                    now,
                    int(i),
                    RootCause.pcie,
                    Severity.warning,
                    f"PCIe link degraded on {self.entities[i]}",
                    f"link at Gen{gen[i]:.0f} x{width[i]:.0f}, capable of Gen{max_gen[i]:.0f} x{max_width[i]:.0f}",
                    "RESTART_BM",
                )
            )
        self.pcie.push(now, g("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"))
        grown = self.pcie.growth()
        if grown is None or self.pcie.span() < 10:
            return
        rate = grown * 60.0 / self.pcie.span()
        budget = p.budget_per_minute(gen, width)
        for i in np.flatnonzero(np.isfinite(gen) & (rate > budget)):
            out.append(
                self._finding(
                    now,
                    int(i),
                    RootCause.pcie,
                    Severity.warning,
                    f"PCIe replays on {self.entities[i]}",
                    f"{rate[i]:.0f} replays a minute on Gen{gen[i]:.0f} x{width[i]:.0f} (DCGM budget {budget[i]:.0f})",
                    "RESTART_BM",
                )
            )

    def _nvlink(self, now: float, frame: MetricFrame, out: list[Finding]) -> None:
        g, nv, n = frame.gpu, self.t.nvlink, len(self.entities)
        totals = [g(f"DCGM_FI_DEV_NVLINK_{k}_ERROR_COUNT_TOTAL") for k in ("CRC_FLIT", "CRC_DATA", "RECOVERY")]
        rows = [frame.link_row(f"DCGM_FI_DEV_NVLINK_{k}_ERROR_PER_LINK_TOTAL") for k in ("CRC_FLIT", "CRC_DATA",
                                                                                         "RECOVERY")]  # fmt: skip
        links = [frame.link_values[r].ravel() for r in rows if r is not None] if None not in rows else []
        self.nvlink.push(now, np.concatenate(totals + links))  # every collection, the links' with the totals'
        grown, span = self.nvlink.growth(), self.nvlink.span()
        if grown is None or span < 10:
            return
        flit_grown, data_grown, rec_grown = grown[:n], grown[n : 2 * n], grown[2 * n : 3 * n]
        per_link = self._link_rates(grown[3 * n :], span, frame.link_values.shape[1:]) if links else None
        crc_rate, rec_rate = (flit_grown + data_grown) * 60.0 / span, rec_grown * 60.0 / span
        bad = (crc_rate > nv.crc_errors_per_minute) | (rec_rate > nv.recovery_errors_per_minute)
        for i in np.flatnonzero(bad):
            links_said = ""
            if per_link is not None:
                climbing = climbing_links(per_link[0][i], per_link[1][i], nv.crc_errors_per_minute,
                                          nv.recovery_errors_per_minute)  # fmt: skip
                links_said = f"; {links_named(climbing, per_link[0][i], per_link[1][i])}" if climbing else ""
            where = f" link {climbing[0]}" if links_said and len(climbing) == 1 else ""
            out.append(
                self._finding(
                    now,
                    int(i),
                    RootCause.nvlink,
                    Severity.warning,
                    f"NVLink errors on {self.entities[i]}{where}",
                    f"{crc_rate[i]:.0f} CRC and {rec_rate[i]:.1f} recovery errors a minute (limits "
                    f"{nv.crc_errors_per_minute:g} and {nv.recovery_errors_per_minute:g}){links_said}",
                    "WORKFLOW_NVLINK_ERR",
                )
            )

    @staticmethod
    def _link_rates(grown: np.ndarray, span: float, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Each link's CRC (flit + data) and recovery errors a minute over the window, (entities, links) each, from
        the three per-link counters' growth end to end."""
        m = grown.size // 3
        crc = (_zeroed(grown[:m]) + _zeroed(grown[m : 2 * m])) * 60.0 / span
        return crc.reshape(shape), (_zeroed(grown[2 * m :]) * 60.0 / span).reshape(shape)

    def _recovery(self, now: float, frame: MetricFrame, out: list[Finding]) -> None:
        """The recovery action the driver asks for, judged as the Xid 154 that announces it (one judgement)."""
        if not frame.has_gpu_field("DCGM_FI_DEV_GPU_RECOVERY_ACTION"):
            return
        action = frame.gpu("DCGM_FI_DEV_GPU_RECOVERY_ACTION")
        for i in np.flatnonzero(action > 0):
            state = int(action[i])
            verdict = recovery_state_verdict(state)
            finding = self._finding(
                now, int(i), RootCause.recovery_action, finding_severity(verdict),
                f"{self.entities[i]} needs recovery: NVML recovery action {state:#x}",
                f"DCGM_FI_DEV_GPU_RECOVERY_ACTION = {state} ({verdict.rule}): {verdict.reason}", verdict.action.value,
            )  # fmt: skip
            out.append(finding)

    def _fabric(self, now: float, frame: MetricFrame, out: list[Finding]) -> None:
        """A GPU not in its NVLink domain (health.nvlink.judge_fabric)."""
        if not frame.has_gpu_field("DCGM_FI_DEV_FABRIC_MANAGER_STATUS"):
            return
        status = frame.gpu("DCGM_FI_DEV_FABRIC_MANAGER_STATUS")
        held = self.fabric_pending.update(now, (status == FM_NOT_STARTED) | (status == FM_IN_PROGRESS))
        for i in np.flatnonzero(np.isfinite(status)):
            issue = judge_fabric(float(status[i]), float(held[i]), FABRIC_HOLD_S)
            if issue is None:
                continue
            out.append(
                self._finding(
                    now, int(i), RootCause.nvlink, issue.severity, f"{self.entities[i]} is not in its NVLink domain",
                    f"DCGM_FI_DEV_FABRIC_MANAGER_STATUS = {status[i]:.0f}: {issue.message}; {issue.fix}",
                    "RESTART_FM",
                )
            )  # fmt: skip

    def _idle(self, now: float, frame: MetricFrame, out: list[Finding]) -> None:
        util = frame.gpu("DCGM_FI_DEV_GPU_UTIL")
        held_by = np.array([a is not None for a in frame.attribution], dtype=bool)
        held = self.idle.update(now, held_by & (util < self.t.idle.util_percent))
        cost = frame.gpu(IDLE_COST_FIELD) if frame.has_gpu_field(IDLE_COST_FIELD) else np.full(len(util), np.nan)
        for i in np.flatnonzero(held >= self.t.idle.hold_s):
            owner = frame.attribution[i]
            who = f"{owner.namespace}/{owner.pod}" if owner else "a workload"
            price = "" if np.isnan(cost[i]) else f"; about ${cost[i]:.2f}/hour"
            finding = self._finding(
                now,
                int(i),
                RootCause.idle_gpu,
                Severity.info,
                f"{who} holds {self.entities[i]} but leaves it idle",
                f"utilization {util[i]:.0f}% for {held[i] / 60:.0f} min{price}",
                "NOTIFY_OWNER",
            )
            finding.effect = True  # a hung job's quiet rank is idle too: that hang explains it
            finding.began = now - float(held[i])
            out.append(finding)
