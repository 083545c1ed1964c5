"""GF050-GF054 on hosts' fabric settings (as `gpufleet fabric settings -o json` writes them) and the jobs' NCCL
environment: MTU, RoCE lossless setup, OpenSM's configuration, NCCL_IB_TC against the lossless priority, and SHARP
through CollNet against the aggregation manager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from gpufleet.doctor.catalog import rule_catalog
from gpufleet.model import Severity
from gpufleet.model.fabric_settings import (
    HcaPortSetting,
    HostFabricSettings,
    RoceQosSetting,
    SubnetManagerConfig,
)
from tests.doctor.helpers import doctor, gpu_pod, hits

RULES = ("GF050", "GF051", "GF052", "GF053", "GF054")


def settings(*hosts: HostFabricSettings) -> dict[str, Any]:
    return {"fabricSettings": msgspec.to_builtins(list(hosts))}


def job(**env: str) -> dict[str, Any]:
    pod = gpu_pod("trainer")
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return pod


ROCE = RoceQosSetting("eth2", "mlx5_2", "dscp", pfc=[3], ecn_np=[3], ecn_rp=[3])
IB = HcaPortSetting("mlx5_0", 1, "InfiniBand", "Active", 4096, 4096)


def test_the_rules_are_described_with_sources() -> None:
    catalog = rule_catalog()
    for rule in RULES:
        assert catalog[rule].sources and catalog[rule].description


def test_mtu_and_roce_and_opensm_from_settings(tmp_path: Path) -> None:
    low = HcaPortSetting("mlx5_0", 1, "InfiniBand", "Active", 2048, 4096)
    roce_1500 = HcaPortSetting("mlx5_2", 1, "Ethernet", "Active", 1024, 4096, "eth2", 1500)
    sm = SubnetManagerConfig("/etc/opensm/opensm.conf", ["minhop"], sm_priority=0, sweep_interval=0)
    report = doctor(
        tmp_path,
        ("a.json", settings(HostFabricSettings("gpu-01", ports=[IB]))),
        (
            "b.json",
            settings(
                HostFabricSettings("gpu-02", ports=[low, roce_1500], roce=[msgspec.structs.replace(ROCE, pfc=[])])
            ),
        ),
        ("sm.json", settings(HostFabricSettings("sm-01", opensm=sm, opensm_running=True))),
        check_schema=False,
    )
    mtu = hits(report, "GF050")
    assert sorted(f.object for f in mtu) == ["gpu-02/mlx5_0/1", "gpu-02/mlx5_2/1"]
    assert all(f.file.endswith("b.json") for f in mtu)
    [pfc] = hits(report, "GF051")
    assert "PFC is off" in pfc.message and "--pfc" in pfc.fix
    [sweep] = hits(report, "GF052")  # one host: no fat tree known, so only the disabled sweeps
    assert "sweep_interval 0" in sweep.message and sweep.file.endswith("sm.json")
    assert not [f for f in report.findings if f.rule == "GF090"]  # the documents are read, not skipped


def test_nccl_ib_tc_against_the_lossless_priority(tmp_path: Path) -> None:
    host = settings(HostFabricSettings("gpu-01", roce=[ROCE]))
    report = doctor(
        tmp_path,
        ("host.json", host),
        ("unset.yaml", job(NCCL_DEBUG="INFO")),
        check_schema=False,
    )
    [unset] = hits(report, "GF053")
    assert "NCCL_IB_TC unset (0)" in unset.message and unset.fix == "set NCCL_IB_TC=104"
    assert unset.severity is Severity.warning
    ok = doctor(tmp_path / "ok", ("host.json", host), ("ok.yaml", job(NCCL_IB_TC="106")), check_schema=False)
    assert hits(ok, "GF053") == []  # DSCP 26 -> priority 3
    bad = doctor(tmp_path / "bad", ("host.json", host), ("bad.yaml", job(NCCL_IB_TC="0x68")), check_schema=False)
    assert "not a traffic class" in hits(bad, "GF053")[0].message
    alone = doctor(tmp_path / "alone", ("unset.yaml", job(NCCL_DEBUG="INFO")), check_schema=False)
    assert hits(alone, "GF053") == []  # no RoCE settings in the input: nothing to compare with


def test_sharp_through_collnet(tmp_path: Path) -> None:
    no_am = settings(HostFabricSettings("sm-01", sharp_am_running=False))
    report = doctor(tmp_path, ("sm.json", no_am), ("job.yaml", job(NCCL_COLLNET_ENABLE="1")), check_schema=False)
    found = hits(report, "GF054")
    assert sorted(f.severity for f in found) == [Severity.info, Severity.warning]
    assert any("no SHARP aggregation manager" in f.message and "sm-01" in f.message for f in found)
    assert any("SHARP_COLL_ENABLE_SAT" in f.message for f in found)
    am = settings(HostFabricSettings("sm-01", sharp_am_running=True))
    good = job(NCCL_COLLNET_ENABLE="1", SHARP_COLL_ENABLE_SAT="1")
    assert hits(doctor(tmp_path / "ok", ("sm.json", am), ("job.yaml", good), check_schema=False), "GF054") == []
    unknown = doctor(tmp_path / "unknown", ("job.yaml", good), check_schema=False)
    [note] = hits(unknown, "GF054")
    assert note.severity is Severity.info and "not known" in note.message
    stray = doctor(tmp_path / "stray", ("job.yaml", job(SHARP_COLL_ENABLE_SAT="1")), check_schema=False)
    assert "no effect" in hits(stray, "GF054")[0].message


def test_a_malformed_settings_document_is_reported(tmp_path: Path) -> None:
    report = doctor(tmp_path, ("x.json", {"fabricSettings": [{"ports": []}]}), check_schema=False)
    [problem] = hits(report, "GF050")
    assert "fabricSettings entry" in problem.message and problem.severity is Severity.info
