"""Per-workload attribution of a node's GPUs: which workloads hold each GPU or MIG instance, and what each used.

What one collection knows, each part optional (a part that is missing is said, never guessed):

- allotments: which container or Slurm job was given which device ID (the kubelet's pod-resources API; a Slurm
  prolog's job map). A time-sliced or MPS replica reads ``GPU-<uuid>::<n>``, a MIG device ``MIG-<uuid>`` (or the
  older ``MIG-GPU-<uuid>/<gi>/<ci>``).
- processes: the compute processes on each GPU, with the memory NVML accounts to each, the MIG instance each runs
  in, and, where the driver keeps them, each process's SM utilization samples over the interval.
- owners: which workload each process belongs to (its cgroup, resolved through the node's pod list or the Slurm
  job id in the path).

The rules (`attribute`):

- memory: a workload's is the sum of its processes' accounted memory, exact. What the device uses beyond its
  workloads' processes (the driver, contexts, processes of no workload) is the device's unattributed memory, so the
  parts and the remainder sum to the device's FB_USED.
- compute: a device with one holder gives it the device's own utilization (measured). A shared device whose
  processes all have SM samples (time-slicing on a whole GPU) gives each workload the sum of its processes' samples
  (measured); the parts are scaled down to the device's utilization if they exceed it by more than
  COMPUTE_TOLERANCE_PCT. Where the hardware keeps no per-process samples (MIG instances, MPS clients, some drivers)
  the device's utilization is split evenly among the holders that run a process, and labelled estimated.
- power: the device's own for a single holder; otherwise split by compute share (evenly when all are idle) and
  labelled estimated. A MIG instance has no power reading of its own, so its workloads get none.
- a workload leaves the result as soon as the inputs stop naming it. The join (who holds each device, whose each
  process is) depends only on the allotments, which processes run where and their owners, so an `Attributor` keeps
  it while those stay the same and each collection only splits the new readings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.model.attribution import (
    Allotment,
    Attribution,
    DeviceAttribution,
    GpuProcess,
    ProcessReading,
    Share,
    Sharing,
)
from gpufleet.telemetry.frame import GpuEntity

COMPUTE_TOLERANCE_PCT = 5.0  # measured parts may exceed the device's utilization by this much before rescaling
MEASURED = "measured"
ESTIMATED = "estimated"


# ---- inputs ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttributionInputs:
    allotments: tuple[Allotment, ...] | None = None  # None: no allotment reader (or it failed)
    processes: ProcessReading | None = None  # None: no per-process reader
    owners: Mapping[int, Attribution] | None = None  # pid -> workload; None: no PID map
    replicas: Mapping[str, int] = field(default_factory=dict)  # uuid (or MIG uuid) -> replicas the plugin offers


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """The device's own readings this collection (NaN: none)."""

    memory_used_mib: float = math.nan
    util_pct: float = math.nan
    mem_util_pct: float = math.nan
    power_w: float = math.nan


# ---- result ----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class AttributionResult:
    devices: list[DeviceAttribution | None]  # per entity; None: no holder and no process
    notes: list[str] = field(default_factory=list)  # what could not be placed, once per kind


# ---- device IDs ------------------------------------------------------------------------------------------------

_LEGACY_MIG = re.compile(r"^MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)$")
_INDEX_INSTANCE = re.compile(r"^(\d+)\.(\d+)$")  # a Slurm job map's MIG file name: GPU index . GPU instance


@dataclass(frozen=True, slots=True)
class DeviceRef:
    uuid: str  # GPU-... or MIG-...; "" when the ID names a GPU by index
    replica: int | None = None
    parent: str = ""  # a legacy MIG ID's GPU
    gpu_instance_id: int | None = None
    index: int | None = None  # a GPU named by its index (Slurm's job map)
    minor: int | None = None  # a GPU named by its device minor (NVIDIA's DRA driver's "gpu-N" device: /dev/nvidiaN)


def parse_device_id(device_id: str) -> DeviceRef:
    """A device plugin's device ID: the UUID, with `::<replica>` for a shared replica (time-slicing, MPS)."""
    base, sep, rest = device_id.partition("::")
    replica = int(rest) if sep and rest.isdigit() else None
    if m := _LEGACY_MIG.match(base):
        return DeviceRef(base, replica, parent=m[1], gpu_instance_id=int(m[2]))
    if base.isdigit():
        return DeviceRef("", replica, index=int(base))
    if m := _INDEX_INSTANCE.match(base):
        return DeviceRef("", replica, gpu_instance_id=int(m[2]), index=int(m[1]))
    if base.startswith("gpu-") and base[4:].isdigit():
        return DeviceRef("", replica, minor=int(base[4:]))
    return DeviceRef(base, replica)


class EntityIndex:
    """Finds the frame entity a device ID or a process names."""

    def __init__(self, entities: Sequence[GpuEntity]) -> None:
        self.by_uuid: dict[str, int] = {}
        self.by_instance: dict[tuple[str, int], int] = {}
        self.by_index: dict[int, int] = {}
        self.mig_parents: set[str] = set()
        self.uuid_of_index: dict[int, str] = {}
        self.by_minor: dict[int, int] = {}
        for i, e in enumerate(entities):
            self.uuid_of_index.setdefault(e.gpu, e.uuid)
            minor = e.device_name.removeprefix("nvidia")
            if not e.mig_profile and minor.isdigit():
                self.by_minor.setdefault(int(minor), i)
            if e.mig_profile and e.gpu_instance_id is not None:
                self.by_instance[(e.uuid, e.gpu_instance_id)] = i
                self.mig_parents.add(e.uuid)
                if e.mig_uuid:
                    self.by_uuid[e.mig_uuid] = i
            else:
                self.by_uuid[e.uuid] = i
                self.by_index.setdefault(e.gpu, i)

    def of_device(self, ref: DeviceRef) -> int | None:
        if ref.parent and ref.gpu_instance_id is not None:
            return self.by_instance.get((ref.parent, ref.gpu_instance_id))
        if ref.index is not None and ref.gpu_instance_id is not None:
            return self.by_instance.get((self.uuid_of_index.get(ref.index, ""), ref.gpu_instance_id))
        if ref.index is not None:
            return self.by_index.get(ref.index)
        if ref.minor is not None:
            return self.by_minor.get(ref.minor)
        found = self.by_uuid.get(ref.uuid)
        if found is None and ref.uuid and not ref.uuid.startswith(("GPU-", "MIG-")):
            found = self.by_uuid.get(f"GPU-{ref.uuid}")  # some tools print the UUID without its prefix
        return found

    def of_process(self, proc: GpuProcess) -> int | None:
        if proc.gpu_uuid in self.mig_parents:
            if proc.gpu_instance_id is None:
                return None
            return self.by_instance.get((proc.gpu_uuid, proc.gpu_instance_id))
        return self.by_uuid.get(proc.gpu_uuid)


# ---- the join --------------------------------------------------------------------------------------------------


def same_workload(a: Attribution, b: Attribution) -> bool:
    """Whether a process's owner is this holder: the same container, or the same Slurm job."""
    if a.hpc_job or b.hpc_job:
        return a.hpc_job == b.hpc_job
    return (a.namespace, a.pod, a.container) == (b.namespace, b.pod, b.container)


@dataclass(slots=True)
class _Device:
    holders: list[Attribution] = field(default_factory=list)
    replica_ids: set[int] = field(default_factory=set)
    processes: list[int] = field(default_factory=list)  # positions in the reading's processes


@dataclass(frozen=True, slots=True)
class Held:
    """Who holds one device and whose each of its processes is: the join, which changes only when the
    allotments, the processes on the GPUs or their owners do (processes by position in the reading)."""

    holders: tuple[Attribution, ...]
    allotted: tuple[bool, ...]
    owned: tuple[tuple[int, ...], ...]  # per holder, its processes
    unresolved: tuple[int, ...]  # processes whose workload cannot be told (no PID map, several holders)
    replicas: int
    sharing: Sharing
    sampled: bool  # the device's processes carry SM samples of their own


@dataclass(frozen=True, slots=True)
class Join:
    devices: tuple[Held | None, ...]  # per entity; None: no holder and no process
    notes: tuple[str, ...]


JoinKey = tuple[object, ...]


def join_key(inputs: AttributionInputs) -> JoinKey:
    """What the join depends on: equal keys give equal joins (the readings' numbers are not part of it)."""
    reading = inputs.processes
    procs = None
    if reading is not None:
        procs = (tuple((p.pid, p.gpu_uuid, p.gpu_instance_id, p.mps) for p in reading.processes), reading.sampled)
    owners = dict(inputs.owners) if inputs.owners is not None else None
    return (inputs.allotments, procs, owners, dict(inputs.replicas))


def attribute(
    entities: Sequence[GpuEntity],
    readings: Sequence[DeviceReading],
    inputs: AttributionInputs,
    index: EntityIndex | None = None,
) -> AttributionResult:
    """Who used what of each entity in this collection (see the module's rules). `index` is `entities`' index, kept
    by a caller that attributes the same entities every collection."""
    held = join(entities, inputs, index if index is not None else EntityIndex(entities))
    return measure(entities, held, readings, inputs.processes)


class Attributor:
    """`attribute` for the same entities every collection, joining again only when the join's inputs changed: on
    a node whose pods and processes stay, a collection only splits the new readings."""

    def __init__(self, entities: Sequence[GpuEntity]) -> None:
        self.entities = entities
        self.index = EntityIndex(entities)
        self.joins = 0  # joins computed, for tests and the curious
        self._key: JoinKey | None = None
        self._join: Join | None = None

    def attribute(self, readings: Sequence[DeviceReading], inputs: AttributionInputs) -> AttributionResult:
        key = join_key(inputs)
        if self._join is None or key != self._key:
            self._join = join(self.entities, inputs, self.index)
            self._key = key
            self.joins += 1
        return measure(self.entities, self._join, readings, inputs.processes)


def join(entities: Sequence[GpuEntity], inputs: AttributionInputs, index: EntityIndex) -> Join:
    """Each entity's holders and whose each of its processes is."""
    devices = [_Device() for _ in entities]
    notes: dict[str, str] = {}
    for allot in inputs.allotments or ():
        ref = parse_device_id(allot.device_id)
        i = index.of_device(ref)
        if i is None:
            notes.setdefault("device", f"device ID {allot.device_id!r} names no GPU on this node; skipped")
            continue
        dev = devices[i]
        if ref.replica is not None:
            dev.replica_ids.add(ref.replica)
        if not any(same_workload(h, allot.holder) for h in dev.holders):
            dev.holders.append(allot.holder)
    reading = inputs.processes
    procs = reading.processes if reading is not None else ()
    for pos, proc in enumerate(procs):
        i = index.of_process(proc)
        if i is None:
            notes.setdefault("process", f"process {proc.pid} runs on {proc.gpu_uuid}, not a GPU of this frame")
            continue
        devices[i].processes.append(pos)
    out: list[Held | None] = []
    for i, entity in enumerate(entities):
        dev = devices[i]
        if not dev.holders and not dev.processes:
            out.append(None)
            continue
        mine = [procs[pos] for pos in dev.processes]
        # an instance has no samples of its own, and MPS clients' kernels run in the server's context
        sampled = (
            reading is not None
            and entity.uuid in reading.sampled
            and not entity.mig_profile
            and not any(p.mps for p in mine)
        )
        out.append(_held(entity, dev, procs, inputs, sampled))
    return Join(tuple(out), tuple(notes.values()))


def measure(
    entities: Sequence[GpuEntity],
    held: Join,
    readings: Sequence[DeviceReading],
    reading: ProcessReading | None,
) -> AttributionResult:
    """The join's shares of this collection's readings (`reading`: the processes the join was made from, or ones
    that differ only in their numbers)."""
    procs = reading.processes if reading is not None else ()
    devices = [
        None if h is None else _device(entity, h, readings[i], procs, reading is not None)
        for i, (entity, h) in enumerate(zip(entities, held.devices, strict=True))
    ]
    return AttributionResult(devices, list(held.notes))


def _sharing(entity: GpuEntity, holders: int, processes: list[GpuProcess], replicas: int) -> Sharing:
    shared = holders > 1 or replicas > 1
    if entity.mig_profile:
        return Sharing.mig_shared if shared else Sharing.mig
    if any(p.mps for p in processes):
        return Sharing.mps
    return Sharing.time_slicing if shared else Sharing.exclusive


def _held(
    entity: GpuEntity, dev: _Device, procs: Sequence[GpuProcess], inputs: AttributionInputs, sampled: bool
) -> Held:
    offered = inputs.replicas.get(entity.mig_uuid or entity.uuid, 0)
    replicas = max(offered, len(dev.replica_ids), 1)
    holders = list(dev.holders)
    owned: dict[int, list[int]] = {k: [] for k in range(len(holders))}
    allotted = [True] * len(holders)
    unresolved: list[int] = []
    known_allotments = inputs.allotments is not None  # without them, no one can be said not to have been given it
    mine = [procs[pos] for pos in dev.processes]
    mps = any(p.mps for p in mine)
    for pos, proc in zip(dev.processes, mine, strict=True):
        # on an MPS GPU the processes that are not clients are the MPS server (its daemon's pod): the device's own
        k = _holder_of(proc, holders, allotted, inputs.owners, known_allotments, adopt=not mps or proc.mps)
        if k is None:
            if inputs.owners is None and holders:  # else a process of no workload: the device's remainder
                unresolved.append(pos)
        else:
            owned.setdefault(k, []).append(pos)
    n = len(holders)
    return Held(
        holders=tuple(holders),
        allotted=tuple(allotted),
        owned=tuple(tuple(owned.get(k, ())) for k in range(n)),
        unresolved=tuple(unresolved),
        replicas=replicas,
        sharing=_sharing(entity, n, mine, replicas),
        sampled=sampled,
    )


def _device(
    entity: GpuEntity, held: Held, reading: DeviceReading, procs: Sequence[GpuProcess], have_processes: bool
) -> DeviceAttribution:
    holders = held.holders
    n = len(holders)
    owned = {k: [procs[pos] for pos in held.owned[k]] for k in range(n)}
    unresolved = [procs[pos] for pos in held.unresolved]
    memory = _memory(n, owned, unresolved, have_processes)
    compute, method, excess = _compute(n, owned, unresolved, reading.util_pct, held.sampled, have_processes)
    mem_util = _mem_util(n, owned, reading.mem_util_pct, held.sampled, method)
    power, power_method = _power(n, compute, reading.power_w, entity)
    shares = tuple(
        Share(
            holder=holders[k],
            memory_mib=memory[k],
            compute_pct=compute[k],
            compute_method=method[k],
            mem_util_pct=mem_util[k],
            power_w=power[k],
            power_method=power_method,
            processes=len(owned[k]),
            allotted=held.allotted[k],
        )
        for k in range(n)
    )
    known = [m for m in memory if not math.isnan(m)]
    rest_memory = math.nan
    if not math.isnan(reading.memory_used_mib) and (len(known) == n or not n):
        rest_memory = max(0.0, reading.memory_used_mib - sum(known))
    rest_compute = math.nan
    if not math.isnan(reading.util_pct) and all(not math.isnan(c) for c in compute):
        rest_compute = max(0.0, reading.util_pct - sum(compute))
    return DeviceAttribution(held.sharing, held.replicas, shares, rest_memory, rest_compute, excess)


def _holder_of(
    proc: GpuProcess,
    holders: list[Attribution],
    allotted: list[bool],
    owners: Mapping[int, Attribution] | None,
    known_allotments: bool,
    adopt: bool = True,
) -> int | None:
    """The index of the holder a process belongs to (taking the owner's workload name, which the allotment does not
    carry), adding its owner when it was not given the device and `adopt` says it may be."""
    if owners is None:
        return 0 if len(holders) == 1 else None
    owner = owners.get(proc.pid)
    if owner is None:
        return None
    for k, h in enumerate(holders):
        if same_workload(h, owner):
            if owner.workload and not h.workload:
                holders[k] = Attribution(h.pod, h.namespace, h.container, owner.workload, h.hpc_job)
            return k
    if not adopt:
        return None
    holders.append(owner)
    allotted.append(not known_allotments)
    return len(holders) - 1


def _memory(
    n: int, owned: dict[int, list[GpuProcess]], unresolved: list[GpuProcess], have_processes: bool
) -> list[float]:
    if not have_processes or unresolved:
        return [math.nan] * n
    out = []
    for k in range(n):
        values = [p.used_memory_mib for p in owned.get(k, ())]
        out.append(math.nan if any(v is None for v in values) else float(sum(v for v in values if v is not None)))
    return out


def _compute(
    n: int,
    owned: dict[int, list[GpuProcess]],
    unresolved: list[GpuProcess],
    device_util: float,
    sampled: bool,
    have_processes: bool,
) -> tuple[list[float], list[str], float]:
    if n == 0:
        return [], [], math.nan
    if n == 1 and not unresolved:
        if math.isnan(device_util):
            return [math.nan], [""], math.nan
        return [device_util], [MEASURED], math.nan
    if sampled and not unresolved:
        parts = [float(sum(p.sm_util or 0.0 for p in owned.get(k, ()))) for k in range(n)]
        total = sum(parts)
        excess = math.nan
        if not math.isnan(device_util):
            excess = max(0.0, total - device_util)
            if total > device_util + COMPUTE_TOLERANCE_PCT and total > 0:
                parts = [p * device_util / total for p in parts]
        return parts, [MEASURED] * n, excess
    if math.isnan(device_util):
        return [math.nan] * n, [""] * n, math.nan
    if have_processes and not unresolved:
        running = [k for k in range(n) if owned.get(k)]
    else:
        running = list(range(n))  # who runs what cannot be told: every holder may
    parts = [device_util / len(running) if k in running else 0.0 for k in range(n)]
    return parts, [ESTIMATED] * n, math.nan


def _mem_util(
    n: int, owned: dict[int, list[GpuProcess]], device: float, sampled: bool, method: list[str]
) -> list[float]:
    if n == 1 and method and method[0] == MEASURED:
        return [device]
    if sampled and all(m == MEASURED for m in method):
        return [float(sum(p.mem_util or 0.0 for p in owned.get(k, ()))) for k in range(n)]
    return [math.nan] * n


def _power(n: int, compute: list[float], device_power: float, entity: GpuEntity) -> tuple[list[float], str]:
    if n == 0 or math.isnan(device_power) or entity.mig_profile:
        return [math.nan] * n, ""
    if n == 1:
        return [device_power], MEASURED
    known = [0.0 if math.isnan(c) else c for c in compute]
    total = sum(known)
    if total <= 0:
        return [device_power / n] * n, ESTIMATED
    return [device_power * c / total for c in known], ESTIMATED
