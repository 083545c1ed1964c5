"""The node checks of `gpufleet.health.diag` at DCGM's run levels, run on one of the twin's nodes."""

from __future__ import annotations

from gpufleet.errors import UserError
from gpufleet.health.diag import Check, DiagOutcome
from gpufleet.sim.gpu_state import FULL_LOAD_POWER_OVER_TDP, THERMAL_HEADROOM_C
from gpufleet.sim.twin import Twin


def _check(out: DiagOutcome, name: str, level: int, problems: list[str], ok: str) -> None:
    if level <= out.level:
        out.checks.append(Check(name, level, "Fail" if problems else "Pass", "; ".join(problems) or ok))


def twin_diag(twin: Twin, node: str, level: int) -> DiagOutcome:
    """Run the checks of `level` (1-3) on one node of the twin."""
    if level not in (1, 2, 3):
        raise UserError(f"diag level {level}", fix="use -r 1, 2 or 3")
    cluster_node = twin.cluster.node(node)
    g = twin.gpus
    rows = [twin.gpu_index[(node, gpu.index)] for gpu in cluster_node.gpus]
    out = DiagOutcome(node, level)
    sw = cluster_node.software
    deployment = (
        [f"driver {sw.driver_version} but fabric manager {sw.fabric_manager_version}"]
        if (sw.fabric_manager_version != sw.driver_version)
        else []
    )
    deployment += [line.split("NVRM: ", 1)[1][:120] for line in twin.kmsg[node] if "API mismatch" in line][-1:]
    _check(out, "Deployment", 1, deployment, f"driver {sw.driver_version}, CUDA {sw.cuda_version}")
    missing = [f"GPU {int(g.index_on_node[i])} not found" for i in rows if not g.alive[i]]
    missing += [f"GPU {int(g.index_on_node[i])} not responding" for i in rows if g.alive[i] and g.wedged[i]]
    _check(out, "GPU presence", 1, missing, f"{len(rows)} GPUs answer")
    live = [i for i in rows if g.alive[i]]
    pending = [
        f"GPU {int(g.index_on_node[i])} has a pending row remap or page retirement"
        for i in live
        if g.remap_pending[i] or g.retired_pending[i]
    ]
    _check(out, "Page Retirement/Row Remap", 1, pending, "nothing pending")
    nvlink = [
        f"GPU {int(g.index_on_node[i])} NVLink {int(g.nvlink_active[i])}/{int(g.nvlink_links[i])} up"
        for i in live
        if g.nvlink_active[i] < g.nvlink_links[i]
    ]
    _check(out, "NVLink", 1, nvlink, "all links up")
    memory = [f"GPU {int(g.index_on_node[i])} volatile DBE {int(g.ecc_dbe_vol[i])}" for i in live if g.ecc_dbe_vol[i]]
    memory += [f"GPU {int(g.index_on_node[i])} row remap failure" for i in live if g.remap_failure[i]]
    _check(out, "Memory", 2, memory, "no uncorrectable errors")
    pcie = [
        f"GPU {int(g.index_on_node[i])} link Gen{int(g.pcie_gen[i])} x{int(g.pcie_width[i])} of "
        f"Gen{int(g.pcie_max_gen[i])} x{int(g.pcie_max_width[i])}"
        for i in live
        if g.pcie_gen[i] < g.pcie_max_gen[i] or g.pcie_width[i] < g.pcie_max_width[i]
    ]
    _check(out, "PCIe", 2, pcie, "links at full generation and width")
    ni = twin.node_index[node]
    ib = [
        f"HCA rail {rail} link down"
        for (n, rail), p in sorted(twin.ports.nic_port.items())
        if n == ni and not twin.ports.up[p]
    ]
    _check(out, "InfiniBand", 2, ib, f"{sum(1 for (n, _r) in twin.ports.nic_port if n == ni)} ports active")
    stress = []
    for i in live:
        full = FULL_LOAD_POWER_OVER_TDP * g.tdp_w[i]
        power = min(full, g.power_limit_w[i])
        steady = twin.ambient_c + THERMAL_HEADROOM_C / g.tdp_w[i] * power / g.cooling[i]
        gpu = int(g.index_on_node[i])
        if steady >= g.slowdown_c[i]:
            stress.append(f"GPU {gpu} would reach {steady:.0f} C at full load (slowdown {g.slowdown_c[i]:.0f} C)")
        if g.power_brake[i]:
            stress.append(f"GPU {gpu} power brake asserted")
        if g.nvlink_error_rate_per_s[i] > 0:
            stress.append(f"GPU {gpu} NVLink errors under load")
    _check(out, "Stress", 3, stress, "headroom at full load")
    return out
