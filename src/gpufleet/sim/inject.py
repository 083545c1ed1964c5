"""What each injected fault does to the twin: the physical change, and the log lines a real system would print."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

import gpufleet.sim.kmsg as kmsg
import gpufleet.sim.vendor_faults as vendor_faults
from gpufleet.catalog.xid import load_xid_catalog
from gpufleet.model import JobState, TrainingJob
from gpufleet.sim.fault_target import FaultTarget
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.serving import ServiceState
from gpufleet.spec.scenario_spec import FaultType

# Xids whose catalog action is to restart the application: the process dies, its job fails.
APP_FATAL_ACTIONS = {"RESTART_APP"}
# Xids after which the GPU cannot make progress until it is reset or the node rebooted: its job hangs.
GPU_WEDGED_ACTIONS = {"RESET_GPU", "RESTART_BM", "RESTART_VM", "WORKFLOW_XID_48", "CONTACT_SUPPORT"}

STRAGGLER_FACTOR = 1.6
SYMBOL_ERRORS_PER_S = 0.05  # 3 a minute: a BER far above what a healthy NDR link shows in 12 minutes
PCIE_REPLAYS_PER_S = 2.0  # 120 a minute, far above DCGM's per-lane budget for a degraded x8 link
NVLINK_ERRORS_PER_S = 5.0
SLOW_INPUT_FACTOR = 2.0  # the loader delivers a batch in twice the GPU's compute time: steps take about twice as long
SLO_BREACH_FACTOR = 10.0  # a request takes ten times as long: an 80 ms service answers its slowest in seconds
ERROR_BURST_FRACTION = 0.2
TRAFFIC_RAMP_FACTOR = 3.0


def inject(twin: FaultTarget, fault: InjectedFault) -> None:
    handler = _HANDLERS[fault.type]
    handler(twin, fault)


def _gpu(twin: FaultTarget, fault: InjectedFault) -> int:
    assert fault.node is not None and fault.gpu is not None
    return twin.gpu(fault.node, fault.gpu)


def _xid(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _gpu(twin, fault)
    code = fault.code or 0
    twin.emit_xid(i, code)
    info = load_xid_catalog().get(code)
    action = info.nvidia_immediate_action if info else "CONTACT_SUPPORT"
    job = twin.training.job_holding(i)
    if code == 79:
        twin.lose_gpu(i)
    elif code == 48:
        twin.gpus.double_bit_error(i)
        if twin.gpus.ampere_or_newer[i]:
            twin.emit_xid(i, 63)
    elif code == 64:
        twin.gpus.remap_failure[i] = True
    elif code == 74:
        _nvlink_link_fails(twin, fault, i)
    if action in GPU_WEDGED_ACTIONS and code not in (79,):
        twin.gpus.wedged[i] = True
    if job is None:
        return
    if action in APP_FATAL_ACTIONS:
        twin.stop_job(twin.cluster.job(job), f"rank on {fault.node} gpu {fault.gpu} died after Xid {code}")
        fault.effects.append(f"job {job} failed")
    elif action in GPU_WEDGED_ACTIONS or code in (48, 79):
        fault.effects.append(f"job {job} hangs")


def _nvlink_link_fails(twin: FaultTarget, fault: InjectedFault, i: int) -> None:
    """An NVLink error (Xid 74): one link of the GPU degrades. Its CRC, replay and recovery errors climb while the
    driver retrains it, so it stays up and NVML keeps reading its counters (the link a detector must name). Which
    link follows from the fault's id, so a scenario replays the same link."""
    g = twin.gpus
    links = int(g.nvlink_links[i])
    g.nvlink_error_rate_per_s[i] = NVLINK_ERRORS_PER_S
    if links and g.nvlink_failing[i] < 0:
        g.nvlink_failing[i] = fault.id % links
    if g.nvlink_failing[i] >= 0:
        fault.effects.append(f"NVLink link {int(g.nvlink_failing[i])} errors climb")


def _vendor_of(twin: FaultTarget, i: int) -> str:
    return twin.cluster.nodes[int(twin.gpus.node_of[i])].gpus[int(twin.gpus.index_on_node[i])].vendor


def _ecc_dbe(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _gpu(twin, fault)
    if _vendor_of(twin, i) != "nvidia":
        vendor_faults.handle(twin, fault, i)
        return
    fault.code = 48
    _xid(twin, fault)


def _driver_fault(twin: FaultTarget, fault: InjectedFault) -> None:
    """gpu-hang and ras-error: amdgpu's and habanalabs' own reports."""
    vendor_faults.handle(twin, fault, _gpu(twin, fault))


def _off_bus(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _gpu(twin, fault)
    job = twin.training.job_holding(i)
    twin.lose_gpu(i)
    if job:
        fault.effects.append(f"job {job} hangs")


def _thermal(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _gpu(twin, fault)
    twin.gpus.cooling[i] = 0.3  # a dead fan: the heat sink sheds under a third of its normal heat


def _power_brake(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _gpu(twin, fault)
    twin.gpus.power_brake[i] = True
    if fault.duration:
        twin.at(fault.time + fault.duration, partial(_release_brake, twin, i))


def _release_brake(twin: FaultTarget, i: int) -> None:
    twin.gpus.power_brake[i] = False


def _pcie(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _gpu(twin, fault)
    g = twin.gpus
    g.pcie_width[i] = max(1, int(g.pcie_max_width[i]) // 2)
    g.pcie_gen[i] = max(1, int(g.pcie_max_gen[i]) - 2)
    g.pcie_replay_rate_per_s[i] = PCIE_REPLAYS_PER_S


def _nvlink(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _gpu(twin, fault)
    if _vendor_of(twin, i) != "nvidia":
        vendor_faults.handle(twin, fault, i)
        return
    fault.code = 74
    _xid(twin, fault)


def _symbol(twin: FaultTarget, fault: InjectedFault) -> None:
    assert fault.node is not None and fault.rail is not None
    p = twin.port_of(fault.node, fault.rail)
    twin.ports.symbol_rate_per_s[p] = SYMBOL_ERRORS_PER_S * (fault.factor or 1.0)


def _flap(twin: FaultTarget, fault: InjectedFault) -> None:
    assert fault.node is not None and fault.rail is not None
    twin.add_flap(fault.node, fault.rail, fault.time + (fault.duration or 600.0))


def _link_down(twin: FaultTarget, fault: InjectedFault) -> None:
    assert fault.node is not None and fault.rail is not None
    p = twin.port_of(fault.node, fault.rail)
    twin.set_link(p, fault.node, fault.rail, up=False)
    for j, job in enumerate(twin.training.jobs):
        if job.state is JobState.running and p in twin.training.ports[j]:
            fault.effects.append(f"job {job.name} hangs")


def _rank(twin: FaultTarget, fault: InjectedFault) -> int:
    assert fault.job is not None
    job = twin.cluster.job(fault.job)
    j = twin.training.jobs.index(job)
    ranks = twin.training.ranks_of(j)
    return int(ranks[(fault.rank or 0) % ranks.size])


def _nccl_hang(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _rank(twin, fault)
    twin.training.stuck[i] = True
    fault.effects.append(f"job {fault.job} hangs")


def _straggler(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _rank(twin, fault)
    twin.training.straggle[i] = fault.factor or STRAGGLER_FACTOR
    if fault.duration:
        twin.at(fault.time + fault.duration, partial(_unstraggle, twin, i))


def _unstraggle(twin: FaultTarget, i: int) -> None:
    twin.training.straggle[i] = 1.0


def _idle(twin: FaultTarget, fault: InjectedFault) -> None:
    i = _gpu(twin, fault)
    job = twin.training.job_holding(i)
    if job is not None:
        # The rank is alive but starved (a stuck data loader): its GPU idles while the job waits on it.
        twin.training.stuck[i] = True
        fault.effects.append(f"job {job} stalls on an idle rank")
    twin.idle_override[i] = True


def _driver_mismatch(twin: FaultTarget, fault: InjectedFault) -> None:
    assert fault.node is not None
    node = twin.cluster.node(fault.node)
    user_space = node.software.driver_version
    kernel_module = "535.104.05" if not user_space.startswith("535.") else "550.90.07"
    node.software.driver_version = kernel_module
    twin.write_kernel(fault.node, kmsg.api_mismatch_lines(twin.boot_seconds(fault.node), user_space, kernel_module))


def _until(twin: FaultTarget, fault: InjectedFault, undo: Callable[[], None]) -> None:
    """Undo the fault when its duration ends (if it has one)."""
    if fault.duration:
        twin.at(fault.time + fault.duration, undo)


def _job(twin: FaultTarget, fault: InjectedFault) -> tuple[int, TrainingJob]:
    assert fault.job is not None
    job = twin.cluster.job(fault.job)
    return twin.training.jobs.index(job), job


def _loss_plateau(twin: FaultTarget, fault: InjectedFault) -> None:
    j, job = _job(twin, fault)
    twin.training.app.plateau(j, job.step, on=True)
    _until(twin, fault, partial(_end_plateau, twin, j, job))


def _end_plateau(twin: FaultTarget, j: int, job: TrainingJob) -> None:
    twin.training.app.plateau(j, job.step, on=False)


def _steps(twin: FaultTarget) -> np.ndarray:
    return np.array([j.step for j in twin.training.jobs], dtype=np.int64)


def _loss_stall(twin: FaultTarget, fault: InjectedFault) -> None:
    j, _ = _job(twin, fault)
    twin.training.app.stall(j, _steps(twin), on=True)
    _until(twin, fault, partial(_end_stall, twin, j))


def _end_stall(twin: FaultTarget, j: int) -> None:
    twin.training.app.stall(j, _steps(twin), on=False)


def _loss_divergence(twin: FaultTarget, fault: InjectedFault) -> None:
    j, job = _job(twin, fault)
    twin.training.app.diverge(j, job.step, on=True)
    _until(twin, fault, partial(_end_divergence, twin, j, job))


def _end_divergence(twin: FaultTarget, j: int, job: TrainingJob) -> None:
    twin.training.app.diverge(j, job.step, on=False)


def _loss_nan(twin: FaultTarget, fault: InjectedFault) -> None:
    j, job = _job(twin, fault)
    twin.training.app.go_nan(j, job.step, on=True)
    _until(twin, fault, partial(_end_nan, twin, j, job))


def _end_nan(twin: FaultTarget, j: int, job: TrainingJob) -> None:
    twin.training.app.go_nan(j, job.step, on=False)


def _grad_explode(twin: FaultTarget, fault: InjectedFault) -> None:
    j, _ = _job(twin, fault)
    twin.training.app.explode(j, on=True)
    _until(twin, fault, partial(_end_explode, twin, j))


def _end_explode(twin: FaultTarget, j: int) -> None:
    twin.training.app.explode(j, on=False)


def _checkpoint_failure(twin: FaultTarget, fault: InjectedFault) -> None:
    j, _ = _job(twin, fault)
    twin.training.app.checkpoint_failing[j] = True
    _until(twin, fault, partial(_checkpoints_mended, twin, j))


def _checkpoints_mended(twin: FaultTarget, j: int) -> None:
    twin.training.app.checkpoint_failing[j] = False


def _slow_input(twin: FaultTarget, fault: InjectedFault) -> None:
    """The job's data loader (one rank's, with `rank`) falls behind: a step waits for its batch."""
    j, job = _job(twin, fault)
    ranks = twin.training.ranks_of(j) if fault.rank is None else np.array([_rank(twin, fault)])
    twin.training.slow_input(ranks, fault.factor or SLOW_INPUT_FACTOR)
    fault.effects.append(f"job {job.name} waits for its input")
    _until(twin, fault, partial(_input_caught_up, twin, ranks))


def _input_caught_up(twin: FaultTarget, ranks: np.ndarray) -> None:
    twin.training.slow_input(ranks, 1.0)


def _service(twin: FaultTarget, fault: InjectedFault) -> ServiceState | None:
    return next((st for st in twin.services if st.service.name == fault.service), None)


def _slo_breach(twin: FaultTarget, fault: InjectedFault) -> None:
    st = _service(twin, fault)
    if st is not None:
        st.latency_factor = fault.factor or SLO_BREACH_FACTOR
        _until(twin, fault, partial(setattr, st, "latency_factor", 1.0))


def _error_burst(twin: FaultTarget, fault: InjectedFault) -> None:
    st = _service(twin, fault)
    if st is not None:
        st.error_fraction = fault.factor or ERROR_BURST_FRACTION
        _until(twin, fault, partial(setattr, st, "error_fraction", 0.0))


def _traffic_ramp(twin: FaultTarget, fault: InjectedFault) -> None:
    st = _service(twin, fault)
    if st is not None:
        # the rate climbs to its peak over the fault's duration; when it ends, traffic is back to usual
        st.ramp = (fault.time, fault.duration or 1800.0, fault.factor or TRAFFIC_RAMP_FACTOR)
        _until(twin, fault, partial(setattr, st, "ramp", None))


def _service_down(twin: FaultTarget, fault: InjectedFault) -> None:
    st = _service(twin, fault)
    if st is None:
        return
    st.down = True
    fault.effects.append(f"service {st.service.name} stopped reporting")
    _until(twin, fault, partial(_service_back, st))


def _service_back(st: ServiceState) -> None:
    st.down = False
    st.restart()


_HANDLERS = {
    FaultType.xid: _xid,
    FaultType.ecc_dbe: _ecc_dbe,
    FaultType.gpu_off_bus: _off_bus,
    FaultType.thermal_runaway: _thermal,
    FaultType.power_brake: _power_brake,
    FaultType.pcie_degrade: _pcie,
    FaultType.nvlink_errors: _nvlink,
    FaultType.ib_symbol_errors: _symbol,
    FaultType.link_flap: _flap,
    FaultType.link_down: _link_down,
    FaultType.nccl_hang: _nccl_hang,
    FaultType.straggler: _straggler,
    FaultType.idle_gpu: _idle,
    FaultType.driver_mismatch: _driver_mismatch,
    FaultType.gpu_hang: _driver_fault,
    FaultType.ras_error: _driver_fault,
    FaultType.loss_plateau: _loss_plateau,
    FaultType.loss_stall: _loss_stall,
    FaultType.loss_divergence: _loss_divergence,
    FaultType.loss_nan: _loss_nan,
    FaultType.grad_explode: _grad_explode,
    FaultType.checkpoint_failure: _checkpoint_failure,
    FaultType.slow_input: _slow_input,
    FaultType.slo_breach: _slo_breach,
    FaultType.error_burst: _error_burst,
    FaultType.traffic_ramp: _traffic_ramp,
    FaultType.service_down: _service_down,
}
