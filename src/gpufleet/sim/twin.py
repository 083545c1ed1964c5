"""The digital twin: a cluster whose GPUs, links and jobs move forward one tick at a time, deterministically.

Everything downstream reads it as it would read a real cluster: GPU and port counters (arrays), kernel-log and syslog
lines in their real text formats, job state. Faults come from a scenario; what was injected is kept apart (ground
truth) so detectors can be scored against it without ever seeing it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

import gpufleet.sim.kmsg as kmsg
import gpufleet.sim.vendor_faults as vendor_faults
from gpufleet.errors import NotFoundError, UserError
from gpufleet.model import (
    Cluster,
    Entity,
    EntityKind,
    Event,
    GpuHealth,
    InferenceService,
    JobState,
    NodeCondition,
    TrainingJob,
)
from gpufleet.sim.fabric_state import PortArrays
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.gpu_state import GpuArrays
from gpufleet.sim.inject import inject
from gpufleet.sim.pods import SharedPods, ShareGroup, holder_pid
from gpufleet.sim.recorder import Recorder
from gpufleet.sim.serving import ServiceState, step_inference
from gpufleet.sim.vendor_faults import BOOT_NOTICE
from gpufleet.sim.workloads import (
    AllReduceModel,
    TrainingSet,
    build_training,
    carry_over,
    nccl_allreduce_s,
    step_training,
    training_demand,
)

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the reproducible runs' t=0

BOOT_OFFSET_S = 3 * 86400.0  # nodes booted three days before the twin's t=0
REBOOT_S = 300.0
FLAP_PERIOD_S = 90.0
FLAP_DOWN_S = 4.0


@dataclass(slots=True)
class NodeState:
    rebooting_until: float = 0.0


@dataclass(slots=True)
class Flap:
    port: int
    node: str
    rail: int
    start: float
    until: float


class Twin:
    """A simulated GPU cluster. Build it with `gpufleet.sim.scenario.build_twin` or the constructor, then call
    :meth:`step`."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        seed: int = 0,
        tick: float = 1.0,
        ambient_c: float = 25.0,
        jobs: list[TrainingJob] | None = None,
        services: list[InferenceService] | None = None,
        faults: list[InjectedFault] | None = None,
        allreduce: AllReduceModel | None = None,
        cost_per_gpu_hour: dict[str, float] | None = None,
        ring_seconds: int = 300,
        restart_backoff_s: float | None = 120.0,
        epoch: float = EPOCH,
        sharing: list[ShareGroup] | None = None,
    ) -> None:
        self.cluster = cluster
        # Unix time of the twin's t=0: a fixed day for reproducible runs, the wall clock when it runs beside real
        # tools (timestamps its workloads export are compared with Prometheus' time())
        self.epoch = epoch
        self.seed = seed
        self.tick = tick
        self.ambient_c = ambient_c
        self.time = 0.0
        self.rng = np.random.default_rng(seed)
        self.cost_per_gpu_hour = cost_per_gpu_hour or {}
        self.restart_backoff_s = restart_backoff_s
        self.gpus = GpuArrays.from_cluster(cluster, ambient_c)
        self.ports = PortArrays.from_cluster(cluster)
        self.node_index = {n.name: i for i, n in enumerate(cluster.nodes)}
        self.gpu_index = {
            (cluster.nodes[int(ni)].name, int(gi)): k
            for k, (ni, gi) in enumerate(zip(self.gpus.node_of, self.gpus.index_on_node, strict=True))
        }
        self.node_state = {n.name: NodeState() for n in cluster.nodes}
        self.events: list[Event] = []
        self.kmsg: dict[str, list[str]] = {n.name: [] for n in cluster.nodes}
        self.injected: list[InjectedFault] = sorted(faults or [], key=lambda f: f.time)
        self._pending = list(self.injected)
        self._flaps: list[Flap] = []
        self._heal: list[tuple[float, Callable[[], None]]] = []
        self._rebooting: set[str] = set()
        self.idle_override = np.zeros(self.gpus.n, dtype=bool)
        # nodes whose RoCE PFC priorities an operator set apart from the fleet's (sim/fabric_settings.py)
        self.roce_pfc: dict[str, list[int]] = {}
        self.listeners: list[Callable[[Event], None]] = []

        cluster.jobs = list(jobs or [])
        cluster.services = list(services or [])
        transport = cluster.fabric.transport.value
        gpu_model_of = {n.name: n.gpu_model or "" for n in cluster.nodes}
        nic_of = {n.name: (len(n.nics), n.nics[0].speed_gbps if n.nics else 0.0) for n in cluster.nodes}
        self.training: TrainingSet = build_training(
            cluster.jobs,
            self.gpu_index,
            self.node_index,
            gpu_model_of,
            nic_of,
            transport,
            self.ports,
            self.gpus.n,
            allreduce or nccl_allreduce_s,
            seed=seed,
        )
        for job in cluster.jobs:
            job.state = JobState.running
            job.last_step_time = 0.0
        self.services = [
            ServiceState(svc, np.array([self.gpu_index[(svc.node, g)] for g in svc.gpu_indices], dtype=np.int64))
            for svc in cluster.services
        ]
        self.recorder = Recorder(self.gpus.n, ring_seconds=ring_seconds)
        # pods on shared GPUs (and every MIG instance's own readings); its own random stream, from the seed
        self.pods = SharedPods(cluster, self.gpu_index, self.gpus, sharing or [], seed)

    # --- observation helpers ---------------------------------------------------------------------------------

    def gpu(self, node: str, index: int) -> int:
        try:
            return self.gpu_index[(node, index)]
        except KeyError:
            raise NotFoundError(f"no GPU {index} on node {node!r}", fix="list GPUs with `gpufleet get gpus`") from None

    def rebooting(self, node: str) -> bool:
        return self.node_state[node].rebooting_until > 0

    def boot_seconds(self, node: str) -> float:
        return BOOT_OFFSET_S + 17.0 * self.node_index[node] + self.time

    def _emit(self, event: Event) -> None:
        self.events.append(event)
        for listener in self.listeners:
            listener(event)

    def write_kernel(self, node: str, lines: list[str], gpu: int | None = None, **attrs: object) -> None:
        for line in lines:
            self.kmsg[node].append(line)
            entity = Entity(EntityKind.gpu if gpu is not None else EntityKind.node, node, gpu)
            self._emit(Event(self.time, entity, "kmsg", line, {"line": line, **attrs}))

    def _syslog(self, node: str, message: str, **attrs: object) -> None:
        self._emit(Event(self.time, Entity(EntityKind.node, node), "syslog", message, dict(attrs)))

    # --- the loop --------------------------------------------------------------------------------------------

    def step(self) -> None:
        now, dt = self.time, self.tick
        while self._pending and self._pending[0].time <= now:
            self._inject(self._pending.pop(0))
        self._run_timers(now)

        training_demand(self.training, self.gpus, now)
        step_inference(self.services, self.gpus, now, dt, self.rng)
        if self.idle_override.any():
            self.gpus.demand_util[self.idle_override] = 0.0
            self.gpus.allocated[self.idle_override] = True
        self.pods.step(now, dt)

        for i in self.gpus.step(dt, self.ambient_c, self.rng):
            self.lose_gpu(int(i), thermal=True)
        self.ports.step(dt, self.rng)
        for job, state, reason in step_training(self.training, self.gpus, self.ports, now, dt):
            self._emit(Event(now, Entity(EntityKind.job, name=job.name), "job_state", reason, {"state": state.value}))
            if state is JobState.failed:
                self._schedule_restart(job)
        self.time = now + dt
        states = [j.state for j in self.cluster.jobs]
        hung, running = states.count(JobState.hung), states.count(JobState.running)
        self.recorder.record(self.time, self.gpus, hung, running)

    def run(self, seconds: float, progress: Callable[[float], None] | None = None) -> None:
        """Advance `seconds` of simulated time; `progress` is called with simulated seconds done, now and then."""
        steps = round(seconds / self.tick)
        report_every = max(1, steps // 200)
        for k in range(steps):
            self.step()
            if progress is not None and (k + 1) % report_every == 0:
                progress((k + 1) * self.tick)

    def _run_timers(self, now: float) -> None:
        for flap in list(self._flaps):
            if now >= flap.until:
                self.set_link(flap.port, flap.node, flap.rail, up=True)
                self._flaps.remove(flap)
                continue
            phase = (now - flap.start) % FLAP_PERIOD_S
            self.set_link(flap.port, flap.node, flap.rail, up=phase >= FLAP_DOWN_S)
        if self._heal:
            due = [h for h in self._heal if h[0] <= now]
            self._heal = [h for h in self._heal if h[0] > now]
            for _, fn in due:
                fn()
        for name in [n for n in self._rebooting if now >= self.node_state[n].rebooting_until]:
            self._rebooting.discard(name)
            self.node_state[name].rebooting_until = 0.0
            self._finish_reboot(name)

    # --- faults ----------------------------------------------------------------------------------------------

    def _inject(self, fault: InjectedFault) -> None:
        inject(self, fault)

    def emit_xid(self, i: int, code: int) -> None:
        node = self.cluster.nodes[int(self.gpus.node_of[i])]
        gpu = node.gpus[int(self.gpus.index_on_node[i])]
        pid, name = self._culprit(node.name, gpu.index)
        self.gpus.xid_last[i] = code
        line = kmsg.xid_line(self.boot_seconds(node.name), gpu.pci_short, code, pid, name)
        self.write_kernel(node.name, [line], gpu=gpu.index, xid=code)

    def _culprit(self, node: str, gpu: int) -> tuple[int | None, str | None]:
        """The process the driver names in an Xid line: a process on that GPU, if any holds it (the pids the node's
        process list shows)."""
        i = self.gpu_index[(node, gpu)]
        if i in self.pods.shared:
            found = self.pods.culprit(i)
            return found if found is not None else (None, None)
        if self.gpus.allocated[i]:
            return holder_pid(self.node_index[node], gpu), "python"
        return None, None

    def lose_gpu(self, i: int, *, thermal: bool = False) -> None:
        if not self.gpus.alive[i]:
            return
        node = self.cluster.nodes[int(self.gpus.node_of[i])]
        gpu = node.gpus[int(self.gpus.index_on_node[i])]
        self.gpus.alive[i] = False
        if gpu.vendor != "nvidia":
            lines = vendor_faults.lost_lines(gpu, self.boot_seconds(node.name))
            self.write_kernel(node.name, lines, gpu=gpu.index, vendor=gpu.vendor, thermal=thermal)
            return
        self.gpus.xid_last[i] = 79
        lines = kmsg.fallen_off_bus_lines(self.boot_seconds(node.name), gpu.pci_short, gpu.uuid, gpu.serial)
        self.write_kernel(node.name, lines[:2], gpu=gpu.index)
        self.write_kernel(node.name, lines[2:3], gpu=gpu.index, xid=79, thermal=thermal)
        self.write_kernel(node.name, lines[3:], gpu=gpu.index)

    def set_link(self, port: int, node: str, rail: int, *, up: bool) -> None:
        if self.ports.set_link(port, up, self.time):
            netdev = f"ib{rail}"
            self._syslog(node, kmsg.carrier_message(netdev, up), rail=rail, up=up)
            self._emit(
                Event(
                    self.time,
                    Entity(EntityKind.port, node, 1, f"mlx5_{rail}"),
                    "link_state",
                    f"{node} mlx5_{rail} port 1 {'Active' if up else 'Down'}",
                    {"up": up, "leaf": self.ports.leaf_of(port), "rail": rail},
                )
            )

    def port_of(self, node: str, rail: int) -> int:
        try:
            return self.ports.nic_port[(self.node_index[node], rail)]
        except KeyError:
            raise NotFoundError(f"node {node!r} has no NIC on rail {rail}") from None

    def add_flap(self, node: str, rail: int, until: float) -> None:
        self._flaps.append(Flap(self.port_of(node, rail), node, rail, self.time, until))

    def at(self, when: float, fn: Callable[[], None]) -> None:
        self._heal.append((when, fn))

    # --- actions (what remediation backends call) ----------------------------------------------------------

    def cordon(self, node: str, reason: str = "") -> None:
        self.cluster.node(node).unschedulable = True

    def uncordon(self, node: str) -> None:
        self.cluster.node(node).unschedulable = False

    def cordon_holders(self, node: str) -> tuple[str, ...]:
        """The incidents holding `node` cordoned (gpufleet.remediate.backends.cordons), as a node annotation would."""
        return tuple(getattr(self, "_cordon_holders", {}).get(node, ()))

    def set_cordon(self, node: str, unschedulable: bool, holders: list[str]) -> None:
        """Schedulability and its holders, written together (a Kubernetes node's spec and annotation in one patch)."""
        if not hasattr(self, "_cordon_holders"):  # a twin pickled before cordons had holders
            self._cordon_holders: dict[str, tuple[str, ...]] = {}
        self.cluster.node(node).unschedulable = unschedulable
        if holders:
            self._cordon_holders[node] = tuple(holders)
        else:
            self._cordon_holders.pop(node, None)

    def gpu_work(self, node: str, index: int) -> list[tuple[str, str]]:
        """What holds GPU `index` of `node`: (namespace/pod, owner) for each training rank, service replica and
        shared pod on it, named as the node's agent attributes them (sim/gpu_holder_answers.py)."""
        k = self.gpu(node, index)
        out = []
        ts = self.training
        for j, job in enumerate(ts.jobs):
            if job.state in (JobState.running, JobState.hung) and k in ts.ranks_of(j).tolist():
                out.append((f"training/{job.name}-{node}", f"PyTorchJob training/{job.name}"))
        for st in self.services:
            if k in st.gpus.tolist():
                out.append((f"inference/{st.service.name}-0", f"StatefulSet inference/{st.service.name}"))
        for pod in self.pods.running_pods(node):
            if any(c.device is not None and c.device.k == k for c in pod.containers):
                out.append((f"{pod.namespace}/{pod.name}", f"{pod.owner_kind} {pod.namespace}/{pod.workload}"))
        return out

    def drain_gpu(self, node: str, index: int, leave: list[str] | None = None) -> list[tuple[str, str]]:
        """Stop only the work on GPU `index` of `node` (a training job with a rank there ends whole, as a gang does;
        its controller restarts it); pods in the `leave` namespaces keep running. The node stays schedulable.
        Returns the (pod, owner) pairs stopped."""
        k = self.gpu(node, index)
        keep = set(leave or ())
        stopped = [(pod, owner) for pod, owner in self.gpu_work(node, index) if pod.split("/", 1)[0] not in keep]
        ts = self.training
        if "training" not in keep:
            for j, job in enumerate(ts.jobs):
                if job.state in (JobState.running, JobState.hung) and k in ts.ranks_of(j).tolist():
                    self.stop_job(job, f"evicted: GPU {index} of {node} drained")
        if "inference" not in keep:
            for st in [s for s in self.services if k in s.gpus.tolist()]:
                self.gpus.allocated[st.gpus] = False
                self.services.remove(st)
        for pod in self.pods.running_pods(node):
            if pod.namespace not in keep and any(c.device is not None and c.device.k == k for c in pod.containers):
                self.pods.finish(pod, self.time, "Failed")
        return stopped

    def drain(self, node: str) -> list[str]:
        """Cordon `node` and stop every job with a rank on it (their controller restarts them elsewhere)."""
        self.cluster.node(node).unschedulable = True
        stopped = []
        for job in self.cluster.jobs:
            if node in job.nodes and job.state in (JobState.running, JobState.hung):
                self.stop_job(job, f"evicted: node {node} drained")
                stopped.append(job.name)
        for st in self.services:
            if st.service.node == node:
                self.gpus.allocated[st.gpus] = False
        self.services = [s for s in self.services if s.service.node != node]
        self.pods.evict_node(node, self.time)
        return stopped

    def stop_job(self, job: TrainingJob, reason: str, *, restart: bool = True) -> None:
        job.state = JobState.failed
        self.training.hang.pop(job.name, None)
        self._emit(Event(self.time, Entity(EntityKind.job, name=job.name), "job_state", reason, {"state": "Failed"}))
        if restart:
            self._schedule_restart(job)

    def _schedule_restart(self, job: TrainingJob) -> None:
        """The job controller's restart policy: try again after a back-off, without nodes that lost a GPU."""
        if self.restart_backoff_s is None:
            return
        self.at(self.time + self.restart_backoff_s, partial(self._restart, job.name, job.restarts))

    def _restart(self, name: str, restarts: int) -> None:
        current = self.cluster.job(name)
        if current.state is not JobState.failed or current.restarts != restarts:
            return  # someone (a remediation) already requeued it
        bad = [n for n in current.nodes if self._node_unusable(n)]
        self.requeue_job(name, exclude=bad)

    def _node_unusable(self, node: str) -> bool:
        n = self.cluster.node(node)
        idx = [self.gpu_index[(node, g.index)] for g in n.gpus]
        # Like the device plugin, the controller will not hand out a GPU that is lost or wedged by a fatal Xid.
        healthy = self.gpus.alive[idx] & ~self.gpus.wedged[idx]
        return n.unschedulable or bool(self.node_state[node].rebooting_until) or not bool(healthy.all())

    def reset_gpu(self, node: str, index: int) -> bool:
        """Reset one GPU. A GPU that fell off the bus cannot be reset in place: that needs a reboot."""
        i = self.gpu(node, index)
        if not self.gpus.alive[i]:
            return False
        self.gpus.reset(i)
        return True

    def reboot_node(self, node: str) -> None:
        self.cluster.node(node)
        self.drain(node)
        st = self.node_state[node]
        st.rebooting_until = self.time + REBOOT_S
        self._rebooting.add(node)
        idx = [self.gpu_index[(node, g.index)] for g in self.cluster.node(node).gpus]
        self.gpus.alive[idx] = False
        self._syslog(node, "systemd-logind[1]: System is rebooting.", reboot=True)

    def _finish_reboot(self, node: str) -> None:
        idx = np.array([self.gpu_index[(node, g.index)] for g in self.cluster.node(node).gpus], dtype=np.int64)
        for i in idx:
            self.gpus.reset(int(i))
        self.gpus.alive[idx] = True
        self.gpus.temp_c[idx] = self.ambient_c + 8.0
        driver = BOOT_NOTICE.get(self.cluster.node(node).gpu_vendor or "nvidia", BOOT_NOTICE["nvidia"])
        self._syslog(node, f"kernel: Linux version booted; {driver}", reboot=False)

    def set_power_limit(self, node: str, index: int, watts: float) -> None:
        i = self.gpu(node, index)
        lo, hi = 0.3 * self.gpus.tdp_w[i], self.gpus.tdp_w[i]
        if not lo <= watts <= hi:
            raise UserError(f"power limit {watts:g} W is outside {lo:g}..{hi:g} W for this GPU")
        self.gpus.power_limit_w[i] = watts

    def isolate_port(self, node: str, rail: int) -> None:
        """Take a port out of service (as UFM's port isolation does): no traffic, no more error counting."""
        p = self.port_of(node, rail)
        self._flaps = [f for f in self._flaps if f.port != p]
        self.ports.symbol_rate_per_s[p] = 0.0
        self.set_link(p, node, rail, up=False)

    def set_switch_port(self, switch: str, port: int, *, enable: bool) -> None:
        """A switch port disabled (isolated, as `ibportstate ... disable` does) or enabled again; its cable goes down
        or comes back, and a node at the other end sees its carrier go."""
        i = self.ports.by_key.get((switch, port))
        if i is None:
            raise NotFoundError(f"no cabled port {port} on switch {switch!r}")
        peer = int(self.ports.peer[i])
        if enable:
            self.ports.disabled.discard(i)
        else:
            self.ports.disabled.add(i)
            self._flaps = [f for f in self._flaps if f.port not in (i, peer)]
            self.ports.symbol_rate_per_s[[i, peer]] = 0.0
        owner = self.ports.owner[peer]
        if "/" in owner:  # the far end is an HCA: its node sees the link go, as with any cable fault
            node, hca = owner.split("/", 1)
            self.set_link(peer, node, int(hca.rsplit("_", 1)[1]), up=enable)
        else:
            self.ports.set_link(i, enable, self.time)

    def requeue_job(self, name: str, exclude: list[str]) -> bool:
        """Restart a stopped or hung job on the same node count, swapping excluded nodes for spare ones."""
        job = self.cluster.job(name)
        if job.state in (JobState.running, JobState.hung):
            self.stop_job(job, "stopped for requeue", restart=False)
        # A new process on every rank: whatever a stuck process did is gone; a wedged GPU stays wedged.
        self.training.stuck[self.training.ranks_of(self.training.jobs.index(job))] = False
        self.training.hang.pop(job.name, None)
        busy = {n for j in self.cluster.jobs if j.state in (JobState.running, JobState.hung) for n in j.nodes}
        busy |= {s.service.node for s in self.services}
        keep = [n for n in job.nodes if n not in exclude]
        model = self.cluster.node(job.nodes[0]).gpu_model
        spares = [
            n.name
            for n in self.cluster.nodes
            if n.gpus
            and n.name not in busy
            and n.name not in job.nodes
            and not n.unschedulable
            and len(n.gpus) >= job.gpus_per_node
            and n.gpu_model == model  # a rank on another model (or vendor) would not run the job's build
            and not self._node_unusable(n.name)
            and not self.gpus.allocated[[self.gpu_index[(n.name, g.index)] for g in n.gpus]].any()
        ]
        need = len(job.nodes) - len(keep)
        if need > len(spares):
            job.state = JobState.pending
            return False
        new_nodes = keep + spares[:need]
        job.nodes = new_nodes
        job.excluded_nodes = sorted(set(job.excluded_nodes) | set(exclude))
        job.restarts += 1
        self._restart_training()
        job.state = JobState.running
        job.last_step_time = self.time
        self._emit(
            Event(
                self.time,
                Entity(EntityKind.job, name=job.name),
                "job_state",
                "requeued",
                {"state": "Running"},
            )
        )
        return True

    def _restart_training(self) -> None:
        """Rebuild the rank layout after a job moved; progress and per-GPU fault state carry over."""
        old = self.training
        transport = self.cluster.fabric.transport.value
        gpu_model_of = {n.name: n.gpu_model or "" for n in self.cluster.nodes}
        nic_of = {n.name: (len(n.nics), n.nics[0].speed_gbps if n.nics else 0.0) for n in self.cluster.nodes}
        ts = build_training(
            self.cluster.jobs,
            self.gpu_index,
            self.node_index,
            gpu_model_of,
            nic_of,
            transport,
            self.ports,
            self.gpus.n,
            lambda *a: 0.0,
        )
        carry_over(old, ts)
        self.training = ts

    # --- views -----------------------------------------------------------------------------------------------

    def sync_model(self) -> Cluster:
        """Write the arrays' health back into the model objects (for get/describe and the scheduler)."""
        g = self.gpus
        for k in range(g.n):
            node = self.cluster.nodes[int(g.node_of[k])]
            gpu = node.gpus[int(g.index_on_node[k])]
            if not g.alive[k]:
                gpu.health, gpu.health_reason = (
                    GpuHealth.lost,
                    "not reachable (fell off the bus or rebooting)",
                )
            elif g.remap_failure[k] or g.ecc_dbe_vol[k] > 0:
                gpu.health, gpu.health_reason = GpuHealth.unhealthy, "uncorrectable ECC error"
            elif g.remap_pending[k] or g.retired_pending[k]:
                gpu.health, gpu.health_reason = GpuHealth.degraded, "row remap pending: reset to apply"
            else:
                gpu.health, gpu.health_reason = GpuHealth.healthy, ""
        for node in self.cluster.nodes:
            st = self.node_state[node.name]
            ready = "False" if st.rebooting_until else "True"
            node.set_condition(NodeCondition("Ready", ready, "Rebooting" if st.rebooting_until else "KubeletReady"))
        return self.cluster

    def gpu_row(self, k: int) -> dict[str, object]:
        """One GPU's current readings, keyed like `gpufleet get gpus -o json`."""
        g = self.gpus
        node = self.cluster.nodes[int(g.node_of[k])]
        gpu = node.gpus[int(g.index_on_node[k])]
        alive = bool(g.alive[k])
        return {
            "node": node.name,
            "gpu": gpu.index,
            "uuid": gpu.uuid,
            "pci_bus_id": gpu.pci_bus_id,
            "model": gpu.model.product_name,
            "health": gpu.health.value,
            "util_pct": round(float(g.util[k]), 1) if alive else None,
            "temp_c": round(float(g.temp_c[k]), 1) if alive else None,
            "power_w": round(float(g.power_w[k]), 1) if alive else None,
            "sm_clock_mhz": int(g.sm_clock[k]) if alive else None,
            "fb_used_mib": int(g.fb_used_mib[k]) if alive else None,
            "clock_events": int(g.clock_events[k]),
            "ecc_dbe_volatile": int(g.ecc_dbe_vol[k]),
            "remapped_rows_pending": bool(g.remap_pending[k]),
            "pcie": f"gen{int(g.pcie_gen[k])} x{int(g.pcie_width[k])}",
            "xid_last": int(g.xid_last[k]),
            "allocated": bool(g.allocated[k]),
        }
