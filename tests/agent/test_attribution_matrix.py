"""The attribution correctness matrix: whole GPUs, time-slicing x2/x4/x10, MPS, MIG 7x1g and mixed layouts,
multi-container pods, pods starting and ending between scrapes, Slurm jobs sharing a node, and readers missing.

Each case runs a node through the agent's real readers (pod-resources over gRPC, NVML, /proc cgroups, the pod
list; tests.attribution_node) and checks, on every collection: each share's workload (no stale or missing label),
memory exact, compute measured within the tolerance or labelled estimated, parts summing to the device; then that
/metrics carries exactly those workloads (gpufleet's per-workload series, and in --pod-labels mode per-pod
dcgm-exporter series summing to the device).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import Renderer
from tests.attribution_node import POD_LIST_REFRESH_S, Case, Container, Gpu, Pod, Proc, check, expected, running

GPUS = [Gpu(f"GPU-{i:08x}-1111-2222-3333-444455556666") for i in range(8)]
ONE_G = tuple((7 + k, "1g.10gb", 9_856.0) for k in range(7))  # an H100's seven 1g instances (GI 7..13)
MIXED = {
    "3g+2g+1g+1g": (
        (2, "3g.40gb", 40_192.0),
        (3, "2g.20gb", 19_968.0),
        (9, "1g.10gb", 9_856.0),
        (10, "1g.10gb", 9_856.0),
    ),
    "4g+3g": ((1, "4g.40gb", 40_192.0), (2, "3g.40gb", 40_192.0)),
    "2g+2g+2g+1g": (
        (3, "2g.20gb", 19_968.0),
        (4, "2g.20gb", 19_968.0),
        (5, "2g.20gb", 19_968.0),
        (13, "1g.10gb", 9_856.0),
    ),
    "7g": ((0, "7g.80gb", 80_896.0),),
}


def _pid(gpu: int, k: int) -> int:
    return 10_000 + gpu * 100 + k


def whole(n_gpus: int, *, gpus_per_pod: int = 1, sidecar: bool = False, idle: int = 0) -> Case:
    pods, procs = [], []
    for p in range(n_gpus // gpus_per_pod):
        devices = tuple(GPUS[p * gpus_per_pod + g].uuid for g in range(gpus_per_pod))
        containers = (Container("trainer", devices),) + ((Container("log-shipper"),) if sidecar else ())
        pods.append(Pod(f"train-{p}", "ml", containers))
        if p >= n_gpus // gpus_per_pod - idle:
            continue  # holds its GPUs and runs nothing on them
        for g in range(gpus_per_pod):
            gpu = p * gpus_per_pod + g
            procs.append(Proc(_pid(gpu, 0), gpu, 20_000.0 + 1_000 * gpu, sm=80.0, owner=f"ml/train-{p}/trainer"))
    return Case(
        f"whole-{n_gpus}x{gpus_per_pod}{'-sidecar' if sidecar else ''}{f'-idle{idle}' if idle else ''}",
        GPUS[:8],
        pods,
        procs,
    )


def sliced(replicas: int, n_gpus: int, fill: int, *, mps: bool = False, resource: str = "nvidia.com/gpu") -> Case:
    """`fill` pods on each of `n_gpus` GPUs offering `replicas` replicas each."""
    pods, procs = [], []
    per_pod_sm = 90.0 / fill
    for g in range(n_gpus):
        for k in range(fill):
            name = f"nb-{g}-{k}"
            pods.append(Pod(name, f"team-{k % 3}", (Container("lab", (f"{GPUS[g].uuid}::{k}",), resource),)))
            mem = 1_000.0 + 137.0 * k + 11 * g
            procs.append(
                Proc(_pid(g, k), g, mem, sm=None if mps else per_pod_sm, mps=mps, owner=f"team-{k % 3}/{name}/lab")
            )
    case = Case(
        f"{'mps' if mps else 'ts'}x{replicas}-{n_gpus}gpu-{fill}pods",
        GPUS[:8],
        pods,
        procs,
        replicas={GPUS[g].uuid: replicas for g in range(8)},
    )
    if mps:
        case.gpus = [replace(g, util=70.0) for g in case.gpus]
    return case


def mig(
    layout: tuple[tuple[int, str, float], ...], n_gpus: int, *, fill_every: int = 1, shared_gi: int | None = None
) -> Case:
    gpus = [replace(g, mig=layout) if i < n_gpus else g for i, g in enumerate(GPUS[:8])]
    pods, procs = [], []
    for g in range(n_gpus):
        for k, (gi, profile, total) in enumerate(layout):
            if k % fill_every:
                continue
            holders = 2 if gi == shared_gi else 1
            for h in range(holders):
                name = f"inf-{g}-{gi}-{h}"
                device = gpus[g].mig_uuid(gi) + (f"::{h}" if holders > 1 else "")
                pods.append(Pod(name, "serving", (Container("server", (device,), f"nvidia.com/mig-{profile}"),)))
                procs.append(
                    Proc(
                        _pid(g, k * 2 + h),
                        g,
                        min(total * 0.4, 3_000.0 + 100 * h),
                        gi=gi,
                        owner=f"serving/{name}/server",
                    )
                )
    label = "-".join(p for _, p, _ in layout[:2])
    return Case(
        f"mig-{label}-{len(layout)}i-{n_gpus}gpu-every{fill_every}{'-shared' if shared_gi is not None else ''}",
        gpus,
        pods,
        procs,
    )


def multi_container() -> Case:
    c = Case(
        "multi-container",
        GPUS[:8],
        [
            Pod(
                "app-0",
                "web",
                (Container("model", (GPUS[0].uuid,)), Container("embedder", (GPUS[1].uuid,)), Container("proxy")),
            ),
            Pod("app-1", "web", (Container("a", (f"{GPUS[2].uuid}::0",)), Container("b", (f"{GPUS[2].uuid}::1",)))),
        ],
        [
            Proc(_pid(0, 0), 0, 30_000.0, sm=70, owner="web/app-0/model"),
            Proc(_pid(1, 0), 1, 5_000.0, sm=20, owner="web/app-0/embedder"),
            Proc(_pid(2, 0), 2, 3_000.0, sm=25, owner="web/app-1/a"),
            Proc(_pid(2, 1), 2, 4_000.0, sm=35, owner="web/app-1/b"),
            Proc(_pid(2, 2), 2, 500.0, sm=5, owner="web/app-1/b"),
        ],
        replicas={GPUS[2].uuid: 4},
    )
    return c


def slurm(shared: bool, with_mig: bool = False) -> Case:
    gpus = [replace(g, mig=ONE_G) if with_mig and i == 7 else g for i, g in enumerate(GPUS[:8])]
    jobs: dict[str, tuple[str, ...]] = {"0": ("5001",), "1": ("5001",), "2": ("5002",), "3": ("5003",)}
    procs = [
        Proc(_pid(0, 0), 0, 40_000.0, sm=90, owner="job:5001"),
        Proc(_pid(1, 0), 1, 40_000.0, sm=88, owner="job:5001"),
        Proc(_pid(2, 0), 2, 12_000.0, sm=50, owner="job:5002"),
        Proc(_pid(3, 0), 3, 8_000.0, sm=10, owner="job:5003"),
    ]
    if shared:
        jobs["4"] = ("5004", "5005")  # gres/shard: two jobs on one GPU
        procs += [
            Proc(_pid(4, 0), 4, 6_000.0, sm=30, owner="job:5004"),
            Proc(_pid(4, 1), 4, 9_000.0, sm=45, owner="job:5005"),
        ]
    if with_mig:
        jobs["7.7"] = ("5006",)
        jobs["7.8"] = ("5007",)
        procs += [
            Proc(_pid(7, 0), 7, 2_000.0, gi=7, owner="job:5006"),
            Proc(_pid(7, 1), 7, 3_000.0, gi=8, owner="job:5007"),
        ]
    return Case(
        f"slurm-{'shard' if shared else 'exclusive'}{'-mig' if with_mig else ''}",
        gpus,
        procs=procs,
        slurm=jobs,
        readers=frozenset({"job-map", "nvml", "cgroups"}),
    )


def without(case: Case, reader: str) -> Case:
    return replace(case, name=f"{case.name}-no-{reader}", readers=case.readers - {reader})


def with_host_process(case: Case) -> Case:
    return replace(case, name=f"{case.name}-hostproc", procs=[*case.procs, Proc(31_000, 0, 900.0, sm=3, owner="")])


def with_stray(case: Case) -> Case:
    """A pod with NVIDIA_VISIBLE_DEVICES=all, running on GPU 0 it was not given."""
    pods = [*case.pods, Pod("debug", "ops", (Container("shell"),))]
    procs = [*case.procs, Proc(32_000, 0, 700.0, sm=2, owner="ops/debug/shell")]
    return replace(case, name=f"{case.name}-stray", pods=pods, procs=procs)


STEADY: list[Case] = [
    whole(8),
    whole(4),
    whole(1),
    whole(8, gpus_per_pod=2),
    whole(8, gpus_per_pod=8),
    whole(8, sidecar=True),
    whole(8, idle=2),
    with_host_process(whole(8)),
    with_stray(whole(4)),
    *(sliced(r, n, fill) for r in (2, 4, 10) for n, fill in ((1, r), (8, r), (8, max(1, r // 2)))),
    sliced(4, 8, 4, resource="nvidia.com/gpu.shared"),
    with_host_process(sliced(4, 2, 4)),
    with_stray(sliced(2, 1, 2)),
    *(sliced(r, n, r, mps=True) for r in (2, 4, 10) for n in (1, 8)),
    sliced(10, 8, 6, mps=True),
    mig(ONE_G, 1),
    mig(ONE_G, 8),
    mig(ONE_G, 8, fill_every=2),
    *(mig(layout, n) for layout in MIXED.values() for n in (1, 4)),
    mig(MIXED["3g+2g+1g+1g"], 2, shared_gi=2),
    mig(ONE_G, 2, shared_gi=7),
    multi_container(),
    slurm(shared=False),
    slurm(shared=True),
    slurm(shared=True, with_mig=True),
    without(sliced(4, 2, 4), "cgroups"),
    without(whole(8), "cgroups"),
    without(sliced(4, 2, 4), "nvml"),
    without(mig(ONE_G, 1), "nvml"),
    without(with_stray(whole(2)), "pod-resources"),
]


@pytest.mark.parametrize("case", STEADY, ids=[c.name for c in STEADY])
def test_steady_node(case: Case) -> None:
    with running(case) as node:
        for _ in range(2):
            frame = node.collect()
            assert check(frame, case) == []
        _check_metrics(node, case)


def _check_metrics(node: object, case: Case) -> None:
    frame = node.frame  # type: ignore[attr-defined]
    text = Renderer(ExpositionConfig(workload_series_sharing=("all",))).render(frame)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    got = set()
    for name, family in families.items():
        if not name.startswith("gpufleet_workload_gpu_"):
            continue
        for sample in family.samples:
            got.add(_key(sample.labels))
    memory = {}
    for sample in families.get("gpufleet_workload_gpu_memory_used_bytes", type("F", (), {"samples": []})).samples:
        labels = sample.labels
        owner = (
            f"job:{labels['hpc_job']}"
            if labels.get("hpc_job")
            else f"{labels['namespace']}/{labels['pod']}/{labels['container']}"
        )
        memory[(int(labels["gpu"]), int(labels["GPU_I_ID"]) if "GPU_I_ID" in labels else None, owner)] = sample.value
    want = expected(case)
    if "nvml" in case.readers:  # without process data a MIG instance's workloads have no value to export
        assert got == {(e.gpu, e.gi, e.owner) for e in want}
    for e in want:
        if e.memory_mib is not None:
            assert memory[(e.gpu, e.gi, e.owner)] == pytest.approx(e.memory_mib * 2**20)
        else:
            assert (e.gpu, e.gi, e.owner) not in memory
    # dcgm-exporter compat: a shared device's FB_USED split per pod sums to the device's
    compat = Renderer(ExpositionConfig(attribution="labels")).render(frame)
    by_device: dict[tuple[str, str], float] = defaultdict(float)
    for family in text_string_to_metric_families(compat):
        if family.name == "DCGM_FI_DEV_FB_USED":
            for s in family.samples:
                by_device[(s.labels["UUID"], s.labels.get("GPU_I_ID", ""))] += s.value
    for i, entity in enumerate(frame.entities):
        key = (entity.uuid, "" if entity.gpu_instance_id is None else str(entity.gpu_instance_id))
        assert by_device[key] == pytest.approx(frame.gpu("DCGM_FI_DEV_FB_USED")[i], abs=1.0)


def _key(labels: dict[str, str]) -> tuple[int, int | None, str]:
    if labels.get("hpc_job"):
        owner = f"job:{labels['hpc_job']}"
    else:
        owner = f"{labels['namespace']}/{labels['pod']}/{labels['container']}"
    return int(labels["gpu"]), int(labels["GPU_I_ID"]) if "GPU_I_ID" in labels else None, owner


def _churn_cases() -> list[tuple[str, Case, Case]]:
    out = []
    ts = sliced(4, 2, 4)
    fewer = replace(ts, pods=ts.pods[:-1], procs=ts.procs[:-1])
    out.append(("ts-pod-ends", ts, fewer))
    out.append(("ts-pod-starts", fewer, ts))
    replaced = sliced(4, 2, 4)
    replaced.pods[0] = Pod("nb-new", "team-9", (Container("lab", (f"{GPUS[0].uuid}::0",)),))
    replaced.procs[0] = Proc(_pid(0, 50), 0, 2_222.0, sm=22, owner="team-9/nb-new/lab")
    out.append(("ts-replica-changes-hands", ts, replaced))
    w = whole(8)
    out.append(("whole-job-ends", w, replace(w, pods=w.pods[:4], procs=w.procs[:4])))
    out.append(("whole-job-starts", replace(w, pods=[], procs=[]), w))
    m = mig(ONE_G, 2)
    out.append(
        (
            "mig-pods-end",
            m,
            replace(
                m,
                pods=m.pods[::2],
                procs=[p for p in m.procs if p.owner in {f"serving/{q.name}/server" for q in m.pods[::2]}],
            ),
        )
    )
    out.append(("mig-pods-start", replace(m, pods=[], procs=[]), m))
    mp = sliced(10, 1, 10, mps=True)
    out.append(("mps-clients-churn", mp, replace(mp, pods=mp.pods[3:], procs=mp.procs[3:])))
    sl = slurm(shared=True)
    done = dict(sl.slurm)
    done["4"] = ("5005",)
    out.append(
        ("slurm-shard-job-ends", sl, replace(sl, slurm=done, procs=[p for p in sl.procs if p.owner != "job:5004"]))
    )
    out.append(("process-exits-pod-stays", ts, replace(ts, procs=ts.procs[1:])))
    return out


CHURN = _churn_cases()


@pytest.mark.parametrize(("first", "then"), [(a, b) for _, a, b in CHURN], ids=[n for n, _, _ in CHURN])
def test_churn_between_scrapes(first: Case, then: Case) -> None:
    """A workload that ends has no label at the next collection; one that starts has its own at once."""
    with running(first) as node:
        assert check(node.collect(), first) == []
        node.update(then)
        assert check(node.collect(), then) == []
        _check_metrics(node, then)


@pytest.mark.parametrize("case", [sliced(4, 2, 4), sliced(10, 1, 10, mps=True), mig(ONE_G, 1)], ids=lambda c: c.name)
def test_a_terminated_pod_the_kubelet_still_lists_loses_its_labels_when_the_pod_list_says_it_ended(case: Case) -> None:
    """Kubelets before the fix for kubernetes#119423 keep a terminated pod's devices in List: the pod list's phase
    drops them, within one read of the pod list (POD_LIST_REFRESH_S)."""
    ended = replace(case, pods=[*case.pods[:-1], replace(case.pods[-1], phase="Succeeded")], procs=case.procs[:-1])
    with running(case) as node:
        assert check(node.collect(), case) == []
        node.update(ended)
        for _ in range(POD_LIST_REFRESH_S):
            frame = node.collect()
        assert check(frame, ended) == []
        _check_metrics(node, ended)


def test_the_matrix_has_at_least_fifty_cases() -> None:
    assert len(STEADY) + len(CHURN) + 3 >= 50
