"""The digital twin as a telemetry source: fills a MetricFrame exactly as NVML/DCGM readings would.

A GPU that fell off the bus reads as no value at all (NaN, never exported), as dcgm-exporter shows a lost GPU.
Xid counts follow DCGM_EXP_XID_ERRORS_COUNT: Xids of each code seen per GPU within the exporter's window. Clock-event
counts follow DCGM_EXP_CLOCK_EVENTS_COUNT: for each reason, how many of the GPU's clock-event samples within the same
window had it set (one sample per collection), not whether it is set now.

A GPU in MIG mode with instances is one entity per GPU instance (an agent's view, as dcgm-exporter reports it): each
has its own memory used and free and its graphics-engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE, 0-1), no
DCGM_FI_DEV_GPU_UTIL or MEM_COPY_UTIL (DCGM does not support them on MIG instances, dcgm-exporter#50 and #216);
device-wide fields (temperature, power, clocks, error counters) repeat the GPU's value on each instance, as real
dcgm-exporter output shows. Without the engine-activity field in the catalog, GPU_UTIL carries the instance's
utilization instead, so a reader still has one.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from gpufleet.catalog import load_ib_counters
from gpufleet.catalog.clock_events import load_clock_events
from gpufleet.cost.config import CostConfig, PriceBook
from gpufleet.cost.idle import IDLE_COST_FIELD, fill_idle_cost
from gpufleet.cost.prices import node_price
from gpufleet.instrument import names
from gpufleet.model.attribution import Attribution
from gpufleet.sim.app_export import RANK_EXPORT_S, AppSeries, GaugeKey
from gpufleet.sim.gpu_holder_answers import holders_layout, whole_gpu_holders
from gpufleet.sim.twin import Twin
from gpufleet.telemetry.field_sources import SourceFields
from gpufleet.telemetry.fields import IB_PORT_RATE, IB_PORT_UP
from gpufleet.telemetry.frame import GpuEntity, IbPort, MetricFrame

__all__ = ["GPU_FIELDS", "PORT_COUNTERS", "RANK_EXPORT_S", "GaugeKey", "TwinSource"]  # the fleet reads these here

# (DCGM field, twin array, scale)
GPU_FIELDS: tuple[tuple[str, str, float], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock", 1.0),
    ("DCGM_FI_DEV_MEM_CLOCK", "mem_clock", 1.0),
    ("DCGM_FI_DEV_MEMORY_TEMP", "mem_temp_c", 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", "temp_c", 1.0),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w", 1.0),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_mj", 1.0),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay", 1.0),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "pcie_gen", 1.0),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "pcie_width", 1.0),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "pcie_max_gen", 1.0),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "pcie_max_width", 1.0),
    ("DCGM_FI_DEV_GPU_UTIL", "util", 1.0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_copy_util", 1.0),
    ("DCGM_FI_DEV_XID_ERRORS", "xid_last", 1.0),
    ("DCGM_FI_DEV_POWER_VIOLATION", "power_violation_ns", 1.0),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "thermal_violation_ns", 1.0),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clock_events", 1.0),
    ("DCGM_FI_DEV_FB_USED", "fb_used_mib", 1.0),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_sbe_vol", 1.0),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe_vol", 1.0),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ecc_sbe_agg", 1.0),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc_dbe_agg", 1.0),
    ("DCGM_FI_DEV_RETIRED_SBE", "retired_sbe", 1.0),
    ("DCGM_FI_DEV_RETIRED_DBE", "retired_dbe", 1.0),
    ("DCGM_FI_DEV_RETIRED_PENDING", "retired_pending", 1.0),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "nvlink_crc_flit", 1.0),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "nvlink_crc_data", 1.0),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "nvlink_replay", 1.0),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "nvlink_recovery", 1.0),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remap_uncorrectable", 1.0),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remap_correctable", 1.0),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "remap_failure", 1.0),
)

# (DCGM per-link field, twin per-link array): each NVLink link's counters, as the NVML source reads them per link
LINK_FIELDS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL", "link_crc_flit"),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_PER_LINK_TOTAL", "link_crc_data"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_PER_LINK_TOTAL", "link_replay"),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_PER_LINK_TOTAL", "link_recovery"),
)
LINK_STATE = "DCGM_FI_DEV_NVLINK_GET_STATE"

# twin port counter -> PMA counter name (the frame converts octets/4 where the PMA counts that way)
PORT_COUNTERS = {
    "symbol_errors": "SymbolErrorCounter",
    "link_error_recovery": "LinkErrorRecoveryCounter",
    "link_downed": "LinkDownedCounter",
    "rcv_errors": "PortRcvErrors",
    "rcv_remote_phys_errors": "PortRcvRemotePhysicalErrors",
    "xmit_discards": "PortXmitDiscards",
    "vl15_dropped": "VL15Dropped",
    "xmit_wait": "PortXmitWait",
    "xmit_pkts": "PortXmitPkts",
    "rcv_pkts": "PortRcvPkts",
}


ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
MIG_UNSUPPORTED = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL")
NIC_MASKS = ("gpufleet_gpu_nic_port_mask", "gpufleet_gpu_nic_port_external_mask", "gpufleet_gpu_nic_port_up_mask")


def _port_metrics() -> list[str]:
    counters = load_ib_counters()
    return [counters[pma].metric for pma in (*PORT_COUNTERS.values(), "PortXmitData", "PortRcvData")]


# What the twin writes for each GPU (telemetry.field_sources), what for some of its devices only, and why it leaves
# the rest of the catalog empty (a field with no value is not exported).
FIELDS = SourceFields(
    "twin",
    fills=frozenset(
        [
            *(field for field, _, _ in GPU_FIELDS),
            *(field for field, _ in LINK_FIELDS),
            LINK_STATE,
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_SLOWDOWN_TEMP",
            "DCGM_FI_DRIVER_VERSION",
            IDLE_COST_FIELD,
            "DCGM_EXP_CLOCK_EVENTS_COUNT",
            "DCGM_EXP_XID_ERRORS_COUNT",
            *_port_metrics(),
            IB_PORT_UP,
            IB_PORT_RATE,
            # its jobs' and services' own series (sim/app_export.py), on the nodes that host them
            names.TRAINING_LAST_STEP,
            names.TRAINING_STEP_DURATION,
            names.TRAINING_RANK_COMPUTE,
            names.INFERENCE_REQUEST_DURATION,
        ]
    ),
    partly=(
        (ENGINE_ACTIVE, "MIG instances only (their utilization, as DCGM reports it there)"),
        ("gpufleet_gpu_health", "AMD devices only (AMD's own health check)"),
        *((mask, "Gaudi devices only (their built-in ports)") for mask in NIC_MASKS),
    ),
    leaves=(
        ("DCGM_FI_PROF_*", "the twin simulates no profiling counters"),
        ("gpufleet_gpu_afid_*", "the twin simulates no AMD RAS events"),
        ("infiniband_port_*", "the twin simulates no such port counter"),
        ("*", "not simulated by the twin"),
    ),
)


class TwinSource:
    """Reads the twin for one node (an agent's view) or for every node (`node=None`).

    `mig_instances`: a MIG GPU's instances are entities of their own, as an agent reports them (default: the whole
    GPU is one, with the sum of its instances' use, as the fleet's per-GPU snapshots carry it). `attribution`: who
    holds each GPU is set straight from the twin's workloads (the fleet's fast path); an agent reads it through its
    attribution readers instead. `cost`: the cost config its idle-cost series is priced with, as `gpufleet cost
    report` prices the node (default: the catalog's list prices)."""

    name = "twin"

    def __init__(
        self,
        twin: Twin,
        node: str | None = None,
        window_s: float = 300.0,
        *,
        mig_instances: bool = False,
        attribution: bool = True,
        cost: CostConfig | None = None,
    ) -> None:
        self.twin = twin
        self.node = node
        self.window_s = window_s
        self.direct_attribution = attribution
        g = twin.gpus
        if node is None:
            gpus = np.arange(g.n)
        else:
            twin.cluster.node(node)
            gpus = np.flatnonzero(g.node_of == twin.node_index[node])
        columns: list[tuple[int, int]] = []  # (GPU, MIG instance or -1)
        of_gpu = twin.pods.instances.of_gpu
        for k in gpus.tolist():
            columns += [(k, i) for i in of_gpu[k]] if mig_instances and k in of_gpu else [(k, -1)]
        self.gpu_idx = np.array([k for k, _ in columns], dtype=np.int64)  # each column's GPU
        self.inst_idx = np.array([i for _, i in columns], dtype=np.int64)
        self.mig_cols = np.flatnonzero(self.inst_idx >= 0)
        self._mig_inst = self.inst_idx[self.mig_cols]
        nodes = {twin.cluster.nodes[int(g.node_of[k])].name for k in self.gpu_idx}
        self.port_idx = np.array(
            sorted(p for (ni, _r), p in twin.ports.nic_port.items() if twin.cluster.nodes[ni].name in nodes),
            dtype=np.int64,
        )
        self._xids: deque[tuple[float, int, int]] = deque()  # (time, gpu flat index, code)
        # the clock-event bits of each column at each collection within the window, and per reason how many of those
        # samples have it set (kept as the window moves, not recounted)
        self._clock_samples: deque[tuple[float, np.ndarray]] = deque()
        self._clock_counts = np.zeros((len(load_clock_events()), len(self.gpu_idx)), dtype=np.int64)
        self._clock_bits = np.array([e.bit for e in load_clock_events()], dtype=np.uint32)[:, None]
        self._layout: object = None
        self.app = AppSeries(twin, self.gpu_idx, node)
        self._price = self._prices(cost or CostConfig())
        self._seen_events = 0
        self._rows: tuple[object, tuple[np.ndarray, list[str], np.ndarray | None]] | None = None
        self._every_gpu = np.array_equal(self.gpu_idx, np.arange(g.n))  # the columns are the twin's GPUs in order
        models = [twin.cluster.nodes[int(g.node_of[k])].gpus[int(g.index_on_node[k])].model for k in self.gpu_idx]
        self._vendors = np.array([m.vendor for m in models])
        # a Gaudi's on-chip ports: scale-up ports first, then its scale-out ports (bit n: port n)
        ports = np.array([m.nvlink_links + m.scaleout_ports if m.vendor == "intel" else 0 for m in models])
        self._ports_all = (2.0**ports - 1).astype(np.float64)
        scaleout = np.array([m.scaleout_ports for m in models])
        self._ports_external = self._ports_all - (2.0 ** (ports - scaleout) - 1)
        # the columns that carry a GPU's NVLink links: each GPU's first (a MIG GPU's links are written once, on its
        # first instance, as the NVML source writes them)
        first = np.unique(self.gpu_idx, return_index=True)[1] if self.gpu_idx.size else np.array([], dtype=np.int64)
        self._link_cols = np.sort(first).astype(np.int64)

    def _prices(self, cost: CostConfig) -> np.ndarray:
        """Each column's price per GPU-hour, NaN where none covers its model: the report's, on the node's labels
        (its inventory's: pool and rack)."""
        book = PriceBook(cost)
        found: dict[tuple[str, str, str], float] = {}
        out = []
        for k in self.gpu_idx.tolist():
            node = self.twin.cluster.nodes[int(self.twin.gpus.node_of[k])]
            model = node.gpus[int(self.twin.gpus.index_on_node[k])].model.product_name
            key = (model, node.pool, node.rack)
            if key not in found:
                price = node_price(book, model, {"pool": node.pool, "rack": node.rack})
                found[key] = np.nan if price is None else price.usd_per_gpu_hour
            out.append(found[key])
        return np.array(out, dtype=np.float64)

    def entities(self) -> list[GpuEntity]:
        out = []
        twin = self.twin
        inst = twin.pods.instances
        for k, i in zip(self.gpu_idx.tolist(), self.inst_idx.tolist(), strict=True):
            node = twin.cluster.nodes[int(twin.gpus.node_of[k])]
            gpu = node.gpus[int(twin.gpus.index_on_node[k])]
            out.append(
                GpuEntity(
                    gpu=gpu.index,
                    uuid=gpu.uuid,
                    model_name=gpu.model.product_name,
                    hostname=node.name,
                    pci_bus_id=gpu.pci_bus_id,
                    device=gpu.device,
                    mig_profile=inst.profile[i] if i >= 0 else None,
                    gpu_instance_id=inst.gi_id[i] if i >= 0 else None,
                    label_fields=(("DCGM_FI_DRIVER_VERSION", node.software.driver_version),),
                    vendor=gpu.vendor,
                    serial=gpu.serial,
                    mig_uuid=inst.uuid[i] if i >= 0 else "",
                )
            )
        return out

    def ib_ports(self) -> list[IbPort]:
        ports = self.twin.ports
        out = []
        for p in self.port_idx:
            node, hca = ports.owner[int(p)].split("/", 1)
            out.append(IbPort(hca=hca, port=int(ports.number[int(p)]), rail=hca.rsplit("_", 1)[1], hostname=node))
        return out

    def new_frame(self) -> MetricFrame:
        return MetricFrame(tuple(self.entities()), tuple(self.ib_ports()))

    def collect(self, frame: MetricFrame) -> None:
        """Fill `frame` with the twin's current readings (the caller clears the frame once per tick)."""
        twin, g, idx = self.twin, self.twin.gpus, self.gpu_idx
        frame.timestamp = twin.epoch + twin.time
        alive = g.alive[idx]
        rows, attrs, scales = self._gpu_rows(frame)
        if rows.size:  # every field the frame carries in one pass over the twin's arrays, not one per field
            stacked = np.stack([getattr(g, attr) for attr in attrs])
            values = (stacked if self._every_gpu else stacked[:, idx]).astype(np.float64, copy=False)
            if scales is not None:
                values = values * scales
            frame.values[rows] = np.where(alive, values, np.nan)
        if frame.has_gpu_field("DCGM_FI_DEV_FB_FREE"):
            frame.gpu("DCGM_FI_DEV_FB_FREE")[:] = np.where(alive, g.memory_mib[idx] - g.fb_used_mib[idx], np.nan)
        if self.mig_cols.size:
            self._mig_fields(frame, alive)
        if frame.has_gpu_field(IDLE_COST_FIELD):
            fill_idle_cost(frame, self._price)
        self._vendor_fields(frame, alive)
        self._links(frame, alive)
        self._clock_events(frame, alive)
        self._xid_window(frame)
        ports = twin.ports
        for counter, pma in PORT_COUNTERS.items():
            frame.set_ib_pma(pma, ports.counters[counter][self.port_idx])
        frame.set_ib_pma("PortXmitData", ports.counters["xmit_bytes"][self.port_idx] / 4)
        frame.set_ib_pma("PortRcvData", ports.counters["rcv_bytes"][self.port_idx] / 4)
        frame.ib_up[:] = ports.up[self.port_idx].astype(np.float64)  # what sysfs state/phys_state say
        if frame.has_ib_field(IB_PORT_RATE):
            frame.ib(IB_PORT_RATE)[:] = ports.speed_gbps[self.port_idx] * 1e9 / 8  # what sysfs rate says
        self._jobs(frame)

    def _gpu_rows(self, frame: MetricFrame) -> tuple[np.ndarray, list[str], np.ndarray | None]:
        """The frame's rows of the GPU_FIELDS it carries, the twin's array for each and their scales (None when
        every scale is 1), per field set."""
        if self._rows is None or self._rows[0] is not frame.gpu_fields:
            row_of = {f.name: i for i, f in enumerate(frame.gpu_fields)}
            present = [(row_of[field], attr, scale) for field, attr, scale in GPU_FIELDS if field in row_of]
            rows = np.array([row for row, _, _ in present], dtype=np.int64)
            scales = np.array([[scale] for _, _, scale in present], dtype=np.float64)
            used = scales if (scales != 1.0).any() else None
            self._rows = (frame.gpu_fields, (rows, [attr for _, attr, _ in present], used))
        return self._rows[1]

    def _mig_fields(self, frame: MetricFrame, alive: np.ndarray) -> None:
        """A MIG instance's own readings (see the module's note)."""
        cols, i = self.mig_cols, self._mig_inst
        inst = self.twin.pods.instances
        up = alive[cols]
        used = inst.fb_used_mib[i]
        util = inst.util[i]
        if frame.has_gpu_field("DCGM_FI_DEV_FB_USED"):
            frame.gpu("DCGM_FI_DEV_FB_USED")[cols] = np.where(up, used, np.nan)
        if frame.has_gpu_field("DCGM_FI_DEV_FB_FREE"):
            free = np.asarray(inst.memory_mib)[i] - used
            frame.gpu("DCGM_FI_DEV_FB_FREE")[cols] = np.where(up, free, np.nan)
        engine = frame.has_gpu_field(ENGINE_ACTIVE)
        for field in MIG_UNSUPPORTED:
            if frame.has_gpu_field(field):
                frame.gpu(field)[cols] = np.nan
        if engine:
            frame.gpu(ENGINE_ACTIVE)[cols] = np.where(up, util / 100.0, np.nan)
        elif frame.has_gpu_field("DCGM_FI_DEV_GPU_UTIL"):
            frame.gpu("DCGM_FI_DEV_GPU_UTIL")[cols] = np.where(up, util, np.nan)

    def _vendor_fields(self, frame: MetricFrame, alive: np.ndarray) -> None:
        """What only AMD's and Gaudi's agents report: the device's own health verdict (AMD's gpu_health: a device
        wedged by an uncorrectable error fails it) and a Gaudi's built-in RoCE ports (all present and up)."""
        g, idx = self.twin.gpus, self.gpu_idx
        if frame.has_gpu_field("DCGM_FI_DEV_SLOWDOWN_TEMP"):
            frame.gpu("DCGM_FI_DEV_SLOWDOWN_TEMP")[:] = np.where(alive, g.slowdown_c[idx], np.nan)
        if frame.has_gpu_field("gpufleet_gpu_health"):
            healthy = (~g.wedged[idx]).astype(np.float64)
            frame.gpu("gpufleet_gpu_health")[:] = np.where(alive & (self._vendors == "amd"), healthy, np.nan)
        gaudi = alive & (self._vendors == "intel")
        for field, mask in zip(NIC_MASKS, (self._ports_all, self._ports_external, self._ports_all), strict=True):
            if frame.has_gpu_field(field):
                frame.gpu(field)[:] = np.where(gaudi, mask, np.nan)

    def _links(self, frame: MetricFrame, alive: np.ndarray) -> None:
        """Each NVLink link's state and error counters, where the frame carries them: a GPU's links up to its model's
        count, all up (a degrading link retrains and stays up); none for a GPU without NVLink or off the bus."""
        if not frame.link_fields:
            return
        g, cols = self.twin.gpus, self._link_cols
        k = self.gpu_idx[cols]
        width = frame.link_values.shape[2]
        exists = (np.arange(width)[None, :] < np.minimum(g.nvlink_links[k], width)[:, None]) & alive[cols][:, None]
        frame.link_values[:, :, :] = np.nan
        for field, attr in LINK_FIELDS:
            if frame.has_link_field(field):
                frame.link(field)[cols] = np.where(exists, getattr(g, attr)[k][:, :width], np.nan)
        if frame.has_link_field(LINK_STATE):
            frame.link(LINK_STATE)[cols] = np.where(exists, 1.0, np.nan)

    def _clock_events(self, frame: MetricFrame, alive: np.ndarray) -> None:
        """DCGM_EXP_CLOCK_EVENTS_COUNT as dcgm-exporter counts it (NVIDIA/dcgm-exporter 4.5.3-4.8.2,
        internal/pkg/collector/expcollector.go getMetrics with clock_events_collector.go's fieldValueParser): every
        sample of DCGM_FI_DEV_CLOCKS_EVENT_REASONS DCGM holds from the last --clock-events-count-window-size ms adds
        one to each reason whose bit it has set. The twin's samples are its readings, one per collection (a second
        reading at the same instant replaces the first); a GPU that fell off the bus has no series."""
        now = self.twin.time
        samples, counts = self._clock_samples, self._clock_counts
        if samples and samples[-1][0] == now:
            counts -= self._reasons(samples.pop()[1])
        bits = self.twin.gpus.clock_events[self.gpu_idx].astype(np.uint32)
        samples.append((now, bits))
        counts += self._reasons(bits)
        while samples[0][0] < now - self.window_s:
            counts -= self._reasons(samples.popleft()[1])
        frame.clock_events[:] = np.where(alive[None, :], counts, np.nan)

    def _reasons(self, bits: np.ndarray) -> np.ndarray:
        """(reasons, columns): 1 where a column's clock-event bits have the reason set."""
        return ((bits[None, :] & self._clock_bits) != 0).astype(np.int64)

    def _xid_window(self, frame: MetricFrame) -> None:
        twin = self.twin
        events = twin.events
        for e in events[self._seen_events :]:
            if e.kind == "kmsg" and "xid" in e.attrs and e.entity.index is not None:
                k = twin.gpu_index[(e.entity.node, e.entity.index)]
                self._xids.append((e.time, k, int(e.attrs["xid"])))
        self._seen_events = len(events)
        while self._xids and self._xids[0][0] < twin.time - self.window_s:
            self._xids.popleft()
        if not self._xids:
            return
        position: dict[int, list[int]] = {}  # a MIG GPU's Xids show on each of its instances, as its other fields
        for i, k in enumerate(self.gpu_idx.tolist()):
            position.setdefault(k, []).append(i)
        counts: dict[int, np.ndarray] = {}
        for _, k, code in self._xids:
            for col in position.get(k, ()):
                counts.setdefault(code, np.zeros(len(self.gpu_idx)))[col] += 1
        for code, row in counts.items():
            frame.set_xid_count(code, row)

    def _attribution(self, frame: MetricFrame) -> None:
        """Which workload holds each GPU, as the kubelet's pod-resources API would say (rebuilt when it changes): the
        pod, and the job or service that owns it; a shared GPU (or MIG instance) names its holder only while it has
        one."""
        twin = self.twin
        layout = (holders_layout(twin), twin.pods.version)
        if layout == self._layout:
            return
        self._layout = layout
        owner: dict[tuple[int, int], Attribution | None] = {
            (k, -1): Attribution(h.pod, h.namespace, h.container, workload=h.workload)
            for k, h in whole_gpu_holders(twin).items()
        }
        held: dict[tuple[int, int], set[Attribution]] = {}
        for pod in twin.pods.running_pods(self.node):
            for c in pod.containers:
                if c.device is not None:
                    who = Attribution(pod.name, pod.namespace, c.name, workload=pod.workload)
                    held.setdefault((c.device.k, c.device.instance), set()).add(who)
                    held.setdefault((c.device.k, -1), set()).add(who)  # the whole GPU, as the fleet reads it
        for key, holders in held.items():
            owner[key] = next(iter(holders)) if len(holders) == 1 else None
        for i, (k, inst) in enumerate(zip(self.gpu_idx.tolist(), self.inst_idx.tolist(), strict=True)):
            frame.set_attribution(i, owner.get((k, inst)))

    def _jobs(self, frame: MetricFrame) -> None:
        """The workloads' own series, as the agent's scrape of their /metrics would fill them."""
        if self.direct_attribution:
            self._attribution(frame)
        self.app.fill(frame)
