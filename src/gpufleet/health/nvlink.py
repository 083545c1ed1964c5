"""`nvidia-smi nvlink -s` judged: the one verdict `gpufleet diag --nvlink-status` and `gpufleet triage` both give.

Every GPU's links are judged against what its model should have (the GPU catalog) and against the GPUs of the same
model beside it:

- SXM boards (`mesh`) and NVSwitch systems (`fabric`) always have NVLink: a GPU with every link inactive is down
  (critical; a warning when it is GPU 0 listed alone, as a VM given one GPU shows it), some links inactive degrade
  it (a warning; critical when a link is stuck in reset).
- NVL cards are sold with their bridges (`bridged`): they are held to the same rule.
- PCIe cards (`optional`) get NVLink only from NVLink bridges, an optional part fitted to a pair of adjacent cards
  (NVIDIA A100 40GB PCIe product brief PB-10137-001, "NVLink Bridge Support"; NVIDIA H100 PCIe product brief
  PB-11133-001: two H100 PCIe cards joined by three bridges, 600 GB/s). A PCIe card without bridges has every link
  inactive by design, and NVML says so ("Unable to retrieve NVLink information as all links are inActive",
  tests/captures/nvlink_status_a100_pcie_no_bridge_hpe.txt): not a fault, unless the node is known to be built
  with bridges (`bridged=True`). With bridges fitted, a PCIe card is judged by the links its bridges carry: the
  model's link count where the catalog gives it, else the most links active on a card of the same model beside it
  (an H100 PCIe lists its die's 18 links; its three bridges carry 12, tests/captures/
  nvlink_status_h100_pcie_bridged_hpe.txt), so links no bridge reaches are not called down.

The verdict says how much of the input could be judged: a listing that ends mid-record is never Pass, and one that
may lack GPUs (an excerpt, a line that did not read) is Unknown unless what it shows is already wrong.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from gpufleet.catalog.gpus import GpuModelSpec, model_for_product_name
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.topo import NvlinkGpu, NvlinkStatus

Verdict = Literal["Pass", "Warn", "Fail", "Unknown"]
Design = Literal["fabric", "mesh", "bridged", "optional", "none"]

MAX_LISTED = 8  # names listed in one message before "and N more"
BOARD_SIZES = (4, 8, 16)  # GPUs on an HGX/DGX board (SXM, NVSwitch): fewer listed from GPU 0 means a cut listing
EXPECTS_NVLINK = ("fabric", "mesh", "bridged")

_BRIDGE_FIX = "check that the NVLink bridges are present and seated, then reboot"
NVLINK_FIX = {
    "fabric": "on an NVSwitch system check the fabric manager (`systemctl status nvidia-fabricmanager`; its version "
    "must match the driver's) and `nvidia-smi -q | grep -A3 Fabric`; if only this GPU is down, drain the node, reset "
    "the GPU or reboot, and replace it if its links stay inactive",
    "mesh": "drain the node and reboot; NVLinks that stay inactive on an SXM board need the board serviced",
    "bridged": _BRIDGE_FIX,
    "optional": _BRIDGE_FIX,
    "none": _BRIDGE_FIX,  # a model the catalog gives no NVLink that shows some: bridges it has after all
}
PCIE_WITHOUT_BRIDGES = "no active NVLink, as for a PCIe card without bridges"


def nvlink_design(spec: GpuModelSpec | None, name: str) -> Design | None:
    """How a model's GPUs are NVLinked: `fabric` (NVSwitch board), `mesh` (SXM board wired GPU to GPU), `bridged`
    (NVL cards sold with bridges), `optional` (PCIe cards that may carry a bridge), `none`; None: unknown model."""
    if spec is None:
        return None
    if spec.nvlink_links == 0:
        return "none"
    if spec.nvswitch:
        return "fabric"
    names = " ".join([name, spec.name, spec.product_name, *spec.aliases]).lower()
    if "sxm" in names:
        return "mesh"
    if re.search(r"\bnvl\b|-nvl\b", names):
        return "bridged"
    return "optional"


def listed(names: Sequence[str]) -> str:
    more = len(names) - MAX_LISTED
    return ", ".join(names[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def speed(value: float) -> str:
    return f"{value:g} GB/s"


def entity(gpu: NvlinkGpu) -> str:
    if gpu.index < 0:
        return "a GPU whose line is not in the input"
    return f"GPU {gpu.index} ({gpu.name})" if gpu.name else f"GPU {gpu.index}"


@dataclass(frozen=True, slots=True)
class NvlinkIssue:
    """One thing wrong with one GPU's links, with the lines that show it."""

    severity: Severity
    code: str  # "NVLink down", "NVLink inactive links", ...
    message: str
    entity: str
    fix: str
    evidence: tuple[str, ...] = ()


@dataclass(slots=True)
class NvlinkJudgement:
    """What `nvidia-smi nvlink -s` says about the node's NVLinks."""

    issues: list[NvlinkIssue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    judged: bool = True  # False: no GPU in the input could be judged (unknown models, nothing listed)
    cut_short: str | None = None  # the input surely ends inside a record
    partial: str | None = None  # the input may lack GPUs
    problems: list[str] = field(default_factory=list)  # lines or values that did not read
    active: list[NvlinkGpu] = field(default_factory=list)  # GPUs with NVLink up

    @property
    def found(self) -> bool:
        return any(i.severity in (Severity.critical, Severity.warning) for i in self.issues)

    @property
    def verdict(self) -> Verdict:
        """Fail on anything critical; Unknown when the input cannot support a verdict (nothing judged, cut
        mid-record, or possibly missing GPUs with nothing wrong shown); Warn on warnings; else Pass."""
        if any(i.severity is Severity.critical for i in self.issues):
            return "Fail"
        if not self.judged or self.cut_short or ((self.partial or self.problems) and not self.found):
            return "Unknown"
        return "Warn" if self.found else "Pass"


def judge_nvlink(status: NvlinkStatus | Sequence[NvlinkGpu], *, bridged: bool | None = None) -> NvlinkJudgement:
    """Every GPU's links judged against what its model should have. `bridged=True`: the node is known to be built
    with NVLink bridges, so a PCIe card without an active link is down, not a card without bridges."""
    if not isinstance(status, NvlinkStatus):
        status = NvlinkStatus(list(status))
    out = NvlinkJudgement(problems=list(status.problems))
    judge = _Judge(status.gpus, out, bridged)
    for number, gpu in enumerate(status.gpus):
        judge.judge(gpu, last=number == len(status.gpus) - 1)
    if judge.unjudged:
        out.notes.append(
            f"cannot tell whether {listed(judge.unjudged)} should have NVLink: the model is not in the catalog"
        )
    out.cut_short = status.cut_short or judge.may_be_cut
    out.judged = bool(judge.judged or out.cut_short)
    out.partial = _listing_partial(status.gpus)
    out.active = [g for g in status.gpus if g.active_links]
    if out.judged and not out.issues and judge.judged and out.active:
        rates = list(dict.fromkeys(speed(lk.speed_gbps) for g in out.active for lk in g.links if lk.speed_gbps))
        out.notes.append(f"{len(out.active)} GPU(s) with NVLink active, at {', '.join(rates[:3]) or 'no listed speed'}")
    return out


class _Judge:
    """Judges each GPU's links against its model and against the GPUs of the same model beside it."""

    def __init__(self, gpus: list[NvlinkGpu], out: NvlinkJudgement, bridged: bool | None) -> None:
        self.gpus = gpus
        self.out = out
        self.bridged = bridged
        names = {g.name for g in gpus}
        self.specs = {name: model_for_product_name(name) if name else None for name in names}
        # per model name, over the GPUs of that name: how many have a link up, their fastest link, their link
        # counts, the most links active on one of them
        self.active: Counter[str] = Counter(g.name for g in gpus if g.active_links and g.index >= 0)
        self.best: dict[str, float] = {}
        self.counts: dict[str, Counter[int]] = {}
        self.most_active: dict[str, int] = {}
        for g in gpus:
            speeds = [link.speed_gbps for link in g.links if link.active and link.speed_gbps]
            self.best[g.name] = max([self.best.get(g.name, 0.0), *speeds])
            self.most_active[g.name] = max(self.most_active.get(g.name, 0), g.active_links)
            if g.index >= 0:
                self.counts.setdefault(g.name, Counter())[len(g.links)] += 1
        self.judged = 0
        self.unjudged: list[str] = []
        self.may_be_cut: str | None = None

    def add(
        self, gpu: NvlinkGpu, severity: Severity, code: str, message: str, fix: str, links: Iterable[int] = ()
    ) -> None:
        """An issue quoting the GPU's line and the lines of `links` (or of every link not running)."""
        wanted = {f"Link {n}:" for n in links}
        shown = [line for line in gpu.lines[1:] if (any(w in line for w in wanted) if wanted else "GB/s" not in line)]
        self.out.issues.append(NvlinkIssue(severity, code, message, entity(gpu), fix, tuple(gpu.lines[:1] + shown[:7])))

    def most_links_beside(self, gpu: NvlinkGpu) -> int:
        """The most links another GPU of the same name lists."""
        counts = self.counts.get(gpu.name, Counter())
        own = len(gpu.links) if gpu.index >= 0 else -1
        return max([n for n, times in counts.items() if times - (n == own) > 0] or [0])

    def judge(self, gpu: NvlinkGpu, last: bool) -> None:
        spec = self.specs[gpu.name]
        design = nvlink_design(spec, gpu.name)
        peers_active = self.active[gpu.name] - (1 if gpu.active_links and gpu.index >= 0 else 0) > 0
        expected = (
            design in EXPECTS_NVLINK or (design is None and peers_active) or (design == "optional" and self.bridged)
        )
        fix = NVLINK_FIX.get(design or "fabric", NVLINK_FIX["fabric"])
        model = spec.name if spec is not None else "its model"
        listed_links = sum(1 for link in gpu.links if link.state != "unknown")  # a state cut mid-way says nothing
        if gpu.unsupported:
            if design in EXPECTS_NVLINK and spec is not None:
                self.judged += 1
                self.add(
                    gpu,
                    Severity.warning,
                    "NVLink unsupported",
                    f"nvidia-smi says this GPU has no NVLink, though "
                    f"{model} has {spec.nvlink_links} links (a VM given one GPU, or NVLink disabled)",
                    fix,
                )
            else:
                self.judged += design is not None
            return
        if listed_links == 0 and not gpu.all_inactive:
            if last:
                self.may_be_cut = f"the input ends right after {entity(gpu)}'s line"
            elif expected:
                self.judged += 1
                self.add(gpu, Severity.warning, "NVLink not listed", "nvidia-smi lists no links for this GPU", fix)
            else:
                self.unjudged.append(entity(gpu))
            return
        if gpu.active_links == 0:
            if expected:
                self.judged += 1
                if design == "optional":
                    why = "the node is built with NVLink bridges"
                elif spec is not None:
                    why = f"{model} has {spec.nvlink_links} links"
                else:
                    why = "GPUs beside it have theirs"
                alone = len(self.gpus) == 1 and gpu.index == 0
                self.add(
                    gpu,
                    Severity.warning if alone else Severity.critical,
                    "NVLink down",
                    f"all NVLinks are inactive ({why}): NVLink is down or the fabric manager is not running"
                    + (" (or a VM given this one GPU, where NVLink has no peer)" if alone else ""),
                    fix,
                )
            elif design in ("optional", "none"):
                self.judged += 1
                self.out.notes.append(f"{entity(gpu)}: {PCIE_WITHOUT_BRIDGES}")
            else:
                self.unjudged.append(entity(gpu))
            return
        self.judged += 1
        self.judge_links(gpu, spec, design, fix, last)

    def judge_links(
        self, gpu: NvlinkGpu, spec: GpuModelSpec | None, design: Design | None, fix: str, last: bool
    ) -> None:
        down = [link for link in gpu.links if link.state in ("inactive", "unreadable")]
        if down and design in ("optional", "none"):
            # a PCIe card's NVLinks are its bridges': only links short of what they carry are down
            carried = spec.nvlink_links if spec is not None and spec.nvlink_links else self.most_active[gpu.name]
            short = carried - gpu.active_links
            stuck = [link for link in down if link.state == "unreadable"]
            down = stuck if short <= 0 else down
            if short <= 0 and not stuck and len(gpu.links) > gpu.active_links:
                self.out.notes.append(
                    f"{entity(gpu)}: {gpu.active_links} of {len(gpu.links)} NVLinks active, those its bridges carry"
                )
        if down:
            severity: Severity = (
                Severity.critical if any("reset" in link.printed.lower() for link in down) else Severity.warning
            )
            names = [f"link {link.link} ({link.printed})" for link in down]
            self.add(
                gpu,
                severity,
                "NVLink inactive links",
                f"{len(down)} of {len(gpu.links)} NVLinks are not "
                f"active: {listed(names)}; traffic over NVLink is slower",
                fix,
                [link.link for link in down],
            )
        speeds = [link.speed_gbps for link in gpu.links if link.active and link.speed_gbps]
        best = self.best.get(gpu.name, 0.0)
        floor = max(best, 0.9 * spec.nvlink_bw_gbps_per_link if spec is not None else 0.0)
        slow = [link for link in gpu.links if link.active and link.speed_gbps and link.speed_gbps < 0.97 * floor]
        if speeds and slow:
            names = [f"link {link.link} at {speed(link.speed_gbps or 0)}" for link in slow]
            if best >= floor or spec is None:
                expect = f"the {speed(best)} of the other links"
            else:
                expect = f"the {speed(spec.nvlink_bw_gbps_per_link)} per link of {spec.name}"
            self.add(
                gpu,
                Severity.warning,
                "NVLink slow links",
                f"{listed(names)}, below {expect}",
                "reset the GPU or reboot; links that stay slow need the board or bridges checked",
                [link.link for link in slow],
            )
        full = spec.nvlink_links if spec is not None else 0
        most = self.most_links_beside(gpu)
        want = max(full, most)
        numbers = sorted(link.link for link in gpu.links)
        contiguous = numbers == list(range(len(numbers)))
        if want and len(gpu.links) < want:
            if last and contiguous:
                self.may_be_cut = f"{entity(gpu)} lists {len(gpu.links)} links where {want} are expected"
            else:
                source = (
                    f"{spec.name} has {full}" if spec is not None and full >= most else f"GPUs beside it list {most}"
                )
                self.add(
                    gpu, Severity.warning, "NVLink links missing", f"lists {len(gpu.links)} NVLinks; {source}", fix
                )


def _listing_partial(gpus: list[NvlinkGpu]) -> str | None:
    """nvlink -s does not say how many GPUs there are; a listing from GPU 0 of SXM/NVSwitch parts that stops short
    of a board's GPU count may be a cut one."""
    indices = [g.index for g in gpus]
    if not gpus or indices != list(range(len(gpus))) or len(gpus) in BOARD_SIZES:
        return None
    designs = {nvlink_design(model_for_product_name(g.name) if g.name else None, g.name) for g in gpus}
    if designs <= {"fabric", "mesh"}:
        return f"it lists {len(gpus)} GPU(s) from GPU 0, where SXM boards carry {' or '.join(map(str, BOARD_SIZES))}"
    return None


# --- live NVML readings: the link whose errors climb, and the GPU's fabric registration ---------------------------


def climbing_links(
    crc_per_minute: np.ndarray, recovery_per_minute: np.ndarray, crc_limit: float, recovery_limit: float
) -> list[int]:
    """The links of one GPU whose CRC (flit + data) or recovery errors grow faster than DCGM's limits, which DCGM's
    NVLink health watch applies per link (DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD names the GPU and the link)."""
    bad = (crc_per_minute > crc_limit) | (recovery_per_minute > recovery_limit)
    return [int(k) for k in np.flatnonzero(bad)]


def links_named(links: Sequence[int], crc_per_minute: np.ndarray, recovery_per_minute: np.ndarray) -> str:
    """`link 7 (120 CRC and 0.0 recovery errors a minute)`, for each link named."""
    return "; ".join(
        f"link {k} ({crc_per_minute[k]:.0f} CRC and {recovery_per_minute[k]:.1f} recovery errors a minute)"
        for k in links
    )


# DCGM_FI_DEV_FABRIC_MANAGER_STATUS values (dcgmFabricManagerStatus_t)
FM_NOT_SUPPORTED, FM_NOT_STARTED, FM_IN_PROGRESS, FM_SUCCESS, FM_FAILURE = 0, 1, 2, 3, 4
FABRIC_FIX = NVLINK_FIX["fabric"]


@dataclass(frozen=True, slots=True)
class FabricIssue:
    severity: Severity
    message: str
    fix: str = FABRIC_FIX


def judge_fabric(status: float, held_s: float, hold_s: float) -> FabricIssue | None:
    """A GPU on an NVSwitch or multi-node NVLink system that is not in its NVLink domain: its registration with the
    fabric failed (critical: NCCL cannot use NVLink to its peers), or has not completed `hold_s` after it was first
    seen incomplete (Fabric Manager not started, or stuck training the fabric). A GPU whose fabric state is not
    supported (no NVSwitch fabric) or that joined is not judged."""
    if status == FM_FAILURE:
        return FabricIssue(Severity.critical, "its registration with the NVLink fabric failed (Fabric Manager "
                           "completed, the GPU is not in its NVLink domain)")  # fmt: skip
    if status in (FM_NOT_STARTED, FM_IN_PROGRESS) and held_s >= hold_s:
        what = "has not started" if status == FM_NOT_STARTED else "is still in progress"
        return FabricIssue(Severity.warning, f"its NVLink fabric registration {what} after {held_s:.0f} s: it is "
                           "not in its NVLink domain (is Fabric Manager running?)")  # fmt: skip
    return None


# How long a GPU may stay unregistered (not started, in progress) before it is called out of its domain: Fabric
# Manager trains an HGX baseboard's NVSwitch fabric within about a minute of starting; five minutes leaves a slow
# multi-node NVL72 domain room and catches a Fabric Manager that never started
FABRIC_HOLD_S = 300.0
