"""Who holds each GPU and how busy it is, written from what agents push into the embedded metric store, as the
series a Prometheus that scrapes the agents holds already: DCGM_FI_DEV_GPU_UTIL with the GPU's identity labels,
and gpufleet_gpu_pod_info (namespace, pod, and the workload when a job's ranks or a service's replicas say which)
while a pod holds the GPU. The cost report reads them back through the store's query API, whichever store it is.

Only the embedded store is written: with Prometheus or VictoriaMetrics the agents' /metrics are scraped (the chart's
ServiceMonitor), and a second copy from every control-plane replica would count each GPU-hour again.
"""

from __future__ import annotations

import math

from gpufleet.control.fleet import FleetState, NodeState
from gpufleet.control.metrics import MetricRecorder, Sample
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import POD_INFO_METRIC, gpu_identity_labels
from gpufleet.telemetry.frame import GpuEntity
from gpufleet.telemetry.store import EmbeddedStore

UTIL = "DCGM_FI_DEV_GPU_UTIL"
RECORD_EVERY_S = 15.0  # cluster seconds: Prometheus' usual scrape interval, well inside the store's 5 min lookback


class GpuUseRecorder:
    def __init__(self, recorder: MetricRecorder) -> None:
        self.recorder = recorder
        store = recorder.store
        self.enabled = isinstance(store, EmbeddedStore)
        self.exposition: ExpositionConfig = store.frames.config
        self._identity: dict[tuple[str, int, str, str], dict[str, str]] = {}
        self._at = -math.inf

    def record(self, now: float, fleet: FleetState) -> None:
        if not self.enabled or now - self._at < RECORD_EVERY_S:
            return
        self._at = now
        samples: list[Sample] = []
        for node in fleet.nodes.values():
            if not node.lost and node.metrics is not None and node.inventory is not None:
                samples.extend(self._node(node))
        self.recorder.record(now, samples)

    def _node(self, node: NodeState) -> list[Sample]:
        assert node.metrics is not None and node.inventory is not None
        gpus = {g.index: g for g in node.inventory.gpus}
        util = node.gpu_row(UTIL)
        held = node.metrics.held
        workloads = {r.gpu: fact.job for fact in node.jobs for r in fact.ranks}
        workloads.update({gpu: fact.service for fact in node.services for gpu in fact.gpus})
        out: list[Sample] = []
        for col, index in enumerate(node.metrics.gpus):
            info = gpus.get(index)
            if info is None:
                continue
            identity = self._labels(node.name, index, info.uuid, info.model, info.pci_bus_id)
            value = float(util[col]) if col < util.size else math.nan
            if not math.isnan(value):
                out.append(({"__name__": UTIL, **identity}, value))
            owner = held[col] if col < len(held) else ""
            if owner:
                namespace, _, pod = owner.rpartition("/")
                labels = {"__name__": POD_INFO_METRIC, **identity, "namespace": namespace, "pod": pod}
                if index in workloads:
                    labels["workload"] = workloads[index]
                out.append((labels, 1.0))
        return out

    def _labels(self, node: str, index: int, uuid: str, model: str, pci: str) -> dict[str, str]:
        key = (node, index, uuid, model)
        found = self._identity.get(key)
        if found is None:
            entity = GpuEntity(gpu=index, uuid=uuid, model_name=model, hostname=node, pci_bus_id=pci)
            found = self._identity[key] = dict(gpu_identity_labels(entity, self.exposition))
        return found
