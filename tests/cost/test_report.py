"""Pricing measured GPU time: prices per model, provider and offering (catalog, operator's entries, pool and
capacity-type labels, the default rate, unpriced GPUs), teams, the waste report, the scale-to-zero recommendations,
pricing a report's usage again, and the cost config's errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.catalog.gpu_prices import GpuPrice
from gpufleet.cost.config import CostConfig, PriceBook
from gpufleet.cost.report import build_report
from gpufleet.cost.usage import Usage
from gpufleet.errors import ManifestError
from tests.cost.series import ALL, H100, gpu, held, run, util

A100 = "NVIDIA A100-SXM4-80GB"
AWS_H100 = 98.32 / 8  # p5.48xlarge in the catalog
LAMBDA_A100 = 14.32 / 8  # gpu_8x_a100_80gb_sxm4


def fleet(idle_below: float = 10.0) -> Usage:
    """n1: 8 H100 held by a training job at 90 %; n2: 8 A100, two held by an inference service at 30 %, six by
    nobody; n3: 8 H100, empty for 40 minutes, then held by a notebook at 10 % for the last 20."""
    n1 = [gpu("n1", i) for i in range(8)]
    n2 = [gpu("n2", i, model=A100) for i in range(8)]
    n3 = [gpu("n3", i) for i in range(8)]
    late = [i >= 40 for i in range(60)]
    utils = [util(g, [90.0] * 60) for g in n1] + [util(g, [30.0] * 60) for g in n2[:2]]
    utils += [util(g, [0.0] * 60) for g in n2[2:]] + [util(g, [0.0] * 40 + [10.0] * 20) for g in n3]
    infos = [held(g, ALL, "train-a-n1", "training", "train-a") for g in n1]
    infos += [held(g, ALL, "chat-0", "inference", "chat") for g in n2[:2]]
    infos += [held(g, late, "nb-0", "research", "nb") for g in n3]
    return run(utils, infos, idle_below=idle_below, kinds={"train-a": "job", "chat": "service"},
               pools={"n1": "p5", "n2": "a100", "n3": "p5"})  # fmt: skip


def test_prices_per_model_and_provider() -> None:
    config = CostConfig(pools={"a100": {"provider": "lambda"}})  # type: ignore[dict-item]
    report = build_report(fleet(), config)
    rows = {(m.model, m.provider): m for m in report.by_model}
    h100, a100 = rows[(H100, "aws")], rows[(A100, "lambda")]
    assert h100.usd_per_gpu_hour == pytest.approx(AWS_H100) and a100.usd_per_gpu_hour == pytest.approx(LAMBDA_A100)
    assert h100.held_gpu_hours == pytest.approx(8 + 8 * 20 / 60, abs=0.01)
    assert h100.cost_usd == pytest.approx(h100.held_gpu_hours * AWS_H100, abs=0.02)
    assert (a100.held_gpu_hours, a100.unallocated_gpu_hours) == (2.0, 6.0)
    assert a100.unallocated_cost_usd == pytest.approx(6 * LAMBDA_A100, abs=0.01)
    job = next(w for w in report.by_workload if w.workload == "train-a")
    assert job.cost_usd == pytest.approx(8 * AWS_H100, abs=0.01) and job.kind == "job" and job.util_avg_pct == 90.0
    assert report.by_workload[0].workload == "train-a"  # costliest first
    sources = {p.provider: p.source for p in report.prices}
    assert "p5.48xlarge" in sources["aws"] and "gpu_8x_a100_80gb_sxm4" in sources["lambda"]


def test_the_operators_prices_and_pools_override_the_catalog() -> None:
    config = CostConfig(
        prices=[GpuPrice(model="h100", provider="aws", offering="reserved", usd_per_gpu_hour=7.0, source="our RI")],
        pools={"p5": {"offering": "reserved"}},  # type: ignore[dict-item]
    )
    report = build_report(fleet(), config)
    h100 = next(m for m in report.by_model if m.model == H100)
    assert (h100.offering, h100.usd_per_gpu_hour) == ("reserved", 7.0)
    assert next(p for p in report.prices if p.model == H100).source == "our RI"


def test_a_spot_node_without_a_spot_price_is_said_and_left_out() -> None:
    n = [gpu("n9", i) for i in range(2)]
    usage = run([util(g, [50.0] * 60) for g in n], [held(g, ALL, "p", "ns", "w") for g in n],
                labels={"n9": {"karpenter.sh/capacity-type": "spot"}})  # fmt: skip
    report = build_report(usage, CostConfig())
    assert report.totals.cost_usd == 0.0 and report.totals.unpriced_gpu_hours == 2.0
    assert report.prices[0].offering == "spot" and report.prices[0].usd_per_gpu_hour is None
    assert any("no price" in note and "spot" in note for note in report.notes)
    priced = build_report(usage, CostConfig(default_usd_per_gpu_hour=3.0))
    assert priced.totals.cost_usd == 6.0 and priced.totals.unpriced_gpu_hours == 0.0


def test_namespaces_roll_up_to_teams() -> None:
    config = CostConfig(teams={"training": "ml-platform", "research": "ml-platform", "inference": "serving"})
    report = build_report(fleet(), config)
    teams = {t.name: t for t in report.by_team}
    assert set(teams) == {"ml-platform", "serving"}
    assert teams["ml-platform"].namespaces == ["research", "training"]
    assert teams["ml-platform"].cost_usd == pytest.approx(
        sum(n.cost_usd for n in report.by_namespace if n.name in ("training", "research")), abs=0.02)  # fmt: skip
    unmapped = build_report(fleet(), CostConfig())
    assert {t.name for t in unmapped.by_team} == {"unassigned"}


def test_idle_allocated_and_unallocated_cost() -> None:
    t = build_report(fleet(), CostConfig()).totals
    # at 10 % the notebook is not below the line; n2's six spare GPUs and n3's first 40 minutes are nobody's
    assert t.idle_gpu_hours == 0.0
    assert t.unallocated_gpu_hours == pytest.approx(6 + 8 * 40 / 60, abs=0.01)
    assert t.unallocated_cost_usd == pytest.approx(6 * 40.96575 / 8 + 8 * 40 / 60 * AWS_H100, abs=0.05)
    strict = build_report(fleet(idle_below=50.0), CostConfig()).totals
    assert strict.idle_gpu_hours == pytest.approx(2 + 8 * 20 / 60, abs=0.01)  # the service at 30 %, the notebook
    assert strict.idle_cost_usd == pytest.approx(2 * 40.96575 / 8 + 8 * 20 / 60 * AWS_H100, abs=0.05)
    assert strict.held_gpu_hours == t.held_gpu_hours == pytest.approx(8 + 2 + 8 * 20 / 60, abs=0.01)


def test_the_waste_report() -> None:
    big = [gpu("n4", i) for i in range(8)]
    slices = [gpu("n5", 0, gi=str(k), profile="1g.10gb") for k in (1, 2)]
    eng = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    usage = run(
        [util(g, [10.0] * 60) for g in big] + [util(gpu("n6", i), [0.0] * 60) for i in range(8)],
        [held(g, ALL, "sweep-n4", "research", "sweep") for g in big]
        + [held(slices[0], ALL, "nb-1", "research", "nb"), held(slices[1], ALL, "nb-2", "research", "nb2")],
        engine=[util(slices[0], [0.01] * 60, eng), util(slices[1], [0.6] * 60, eng)],
        idle_below=5.0,
    )
    waste = build_report(usage, CostConfig()).waste
    (low,) = waste.low_util_workloads  # 8 GPUs at 10 %: nine tenths of their cost bought nothing
    assert (low.workload, low.peak_gpus, low.util_avg_pct) == ("sweep", 8.0, 10.0)
    assert low.wasted_usd == pytest.approx(0.9 * low.cost_usd, abs=0.02)
    assert [n.node for n in waste.idle_nodes] == ["n6"]  # n4 is at 10 %, above the 5 % idle line
    assert waste.idle_nodes[0].idle_cost_usd == pytest.approx(8 * AWS_H100, abs=0.01)
    (s,) = waste.idle_mig_slices
    assert (s.node, s.gi_id, s.workload, s.idle_share) == ("n5", "1", "nb", 1.0)
    assert s.idle_cost_usd == pytest.approx(AWS_H100 / 7, abs=0.01)
    assert waste.unallocated_gpu_hours == 8.0


def test_scale_to_zero_for_an_empty_pool() -> None:
    busy = [gpu("s1", i) for i in range(8)]
    spare = [gpu("s2", i) for i in range(8)]
    usage = run(
        [util(g, [70.0] * 60) for g in busy] + [util(g, [0.0] * 60) for g in spare],
        [held(g, ALL, "chat-0", "inference", "chat") for g in busy[:4]],
        kinds={"chat": "service"},
        pools={"s1": "serving", "s2": "serving"},
    )
    (rec,) = build_report(usage, CostConfig()).recommendations
    assert (rec.pool, rec.nodes, rec.removable_nodes, rec.always_empty_nodes) == ("serving", 2, ["s2"], ["s2"])
    assert (rec.saved_node_hours, rec.saved_gpu_hours) == (0.5, 4.0)  # an empty hour, less the 30 min wait
    assert rec.saved_usd == pytest.approx(4 * AWS_H100, abs=0.01)
    nodepool = yaml.safe_load(rec.karpenter)
    assert nodepool["kind"] == "NodePool" and nodepool["metadata"]["name"] == "serving"
    assert nodepool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                                              "consolidateAfter": "30m"}  # fmt: skip
    assert nodepool["spec"]["limits"] == {"nvidia.com/gpu": "8"}  # 4 GPUs at peak, in whole nodes
    flags = rec.cluster_autoscaler
    assert "--scale-down-unneeded-time=30m" in flags and "--nodes=0:1:" in flags
    later = build_report(usage, CostConfig(scale_down={"after_minutes": 90})).recommendations  # type: ignore[arg-type]
    assert later == []  # an hour empty never outlasts a 90-minute wait


def test_a_node_out_of_service_is_never_idle_capacity() -> None:
    """Two empty nodes in a pool: s3 awaits RMA (a critical incident) and s4 is cordoned. Neither is proposed for
    scale-down nor listed as an idle node: the recommendation names them and why; s2, empty and healthy, is."""
    busy = [gpu("s1", i) for i in range(8)]
    spare = {n: [gpu(n, i) for i in range(8)] for n in ("s2", "s3", "s4")}
    usage = run(
        [util(g, [70.0] * 60) for g in busy] + [util(g, [0.0] * 60) for gs in spare.values() for g in gs],
        [held(g, ALL, "chat-0", "inference", "chat") for g in busy[:4]],
        kinds={"chat": "service"},
        pools={n: "serving" for n in ("s1", "s2", "s3", "s4")},
    )
    everything = build_report(usage, CostConfig())
    assert everything.recommendations[0].removable_nodes == ["s2", "s3", "s4"]  # the same hours, healthy
    assert [n.node for n in everything.waste.idle_nodes] == ["s2", "s3", "s4"]
    usage.out_of_service = {"s3": "faulty: INC-000007 gpu-lost", "s4": "cordoned or draining"}
    report = build_report(usage, CostConfig())
    (rec,) = report.recommendations
    assert (rec.nodes, rec.removable_nodes, rec.always_empty_nodes) == (4, ["s2"], ["s2"])
    assert (rec.saved_node_hours, rec.saved_gpu_hours) == (0.5, 4.0)  # s2's empty hour past the wait, alone
    assert "s3 (faulty: INC-000007 gpu-lost)" in rec.why and "s4 (cordoned or draining)" in rec.why
    assert rec.out_of_service_nodes == usage.out_of_service
    assert [n.node for n in report.waste.idle_nodes] == ["s2"]
    # a pool whose only empty nodes are out of service has nothing to propose
    usage.out_of_service["s2"] = "cordoned or draining"
    assert build_report(usage, CostConfig()).recommendations == []


def test_training_pools_only_consolidate_empty_nodes() -> None:
    recs = build_report(fleet(), CostConfig()).recommendations
    (rec,) = recs  # n2 always held a replica: the a100 pool has nothing to remove
    assert (rec.pool, rec.removable_nodes, rec.consolidation_policy) == ("p5", ["n3"], "WhenEmpty")
    assert rec.saved_gpu_hours == pytest.approx(8 * 10 / 60, abs=0.01)  # 40 empty minutes past a 30-minute wait
    assert yaml.safe_load(rec.karpenter)["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert "karpenter.sh/do-not-disrupt" in rec.karpenter and "safe-to-evict" in rec.cluster_autoscaler


def test_a_reports_usage_prices_again_to_the_same_report() -> None:
    report = build_report(fleet(), CostConfig())
    usage = Usage.model_validate_json(report.usage.model_dump_json())
    assert build_report(usage, CostConfig()) == report
    dearer = build_report(usage, CostConfig(prices=[GpuPrice(model="h100-sxm", provider="aws", usd_per_gpu_hour=20)]))
    assert dearer.totals.cost_usd > report.totals.cost_usd


def test_price_book_falls_back_to_the_default_rate() -> None:
    book = PriceBook(CostConfig(default_usd_per_gpu_hour=1.5))
    assert book.price("NVIDIA H100 80GB HBM3", "aws", "on-demand").usd_per_gpu_hour == pytest.approx(AWS_H100)  # type: ignore[union-attr]
    fallback = book.price("Mystery GPU 9000", "aws", "on-demand")
    assert fallback is not None and fallback.usd_per_gpu_hour == 1.5
    assert PriceBook(CostConfig()).price("Mystery GPU 9000", "aws", "on-demand") is None


def test_cost_config_file_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "cost.yaml"
    path.write_text("teams: {training: ml}\nidle_below: 5\n")
    with pytest.raises(ManifestError) as err:
        CostConfig.from_file(path)
    assert "idle_below" in err.value.message and "idle_below_pct" in err.value.message
    for text, field, meant in (
        ("waste: {min_gpu: 2}\n", "waste.min_gpu", "min_gpus"),
        ("pools: {a100: {provder: aws}}\n", "pools.a100.provder", "provider"),
        ("prices: [{model: h100, provider: aws, usd_per_gpu_hr: 2}]\n", "prices.0.usd_per_gpu_hr", "usd_per_gpu_hour"),
    ):
        path.write_text(text)
        with pytest.raises(ManifestError) as err:
            CostConfig.from_file(path)
        assert f"unknown field {field!r}; did you mean {meant!r}?" in err.value.message
    path.write_text("- a list\n")
    with pytest.raises(ManifestError, match="expected a mapping"):
        CostConfig.from_file(path)
    with pytest.raises(ManifestError, match="not found"):
        CostConfig.from_file(tmp_path / "missing.yaml")
    path.write_text("provider: lambda\nteams: {training: ml}\nwaste: {min_gpus: 2}\n")
    config = CostConfig.from_file(path)
    assert (config.provider, config.team_of("training"), config.team_of("other"), config.waste.min_gpus) == (
        "lambda", "ml", "unassigned", 2.0)  # fmt: skip
