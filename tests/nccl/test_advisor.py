from __future__ import annotations

from pathlib import Path

from gpufleet.nccl.advisor import advise, lint_env, parse_env_text, read_env_file
from gpufleet.nccl.topology import Topology


def _vars(topo: Topology) -> dict[str, str]:
    return {a.var: a.value for a in advise(topo)}


def test_roce_rail_optimized() -> None:
    v = _vars(Topology(gpu="h100-sxm", nodes=4, nics_per_node=8, nic_gbps=400, transport="roce"))
    assert v["NCCL_IB_HCA"].count("mlx5_") == 8
    assert v["NCCL_IB_GID_INDEX"] == "3"
    assert v["NCCL_CROSS_NIC"] == "0"
    assert v["NCCL_NVLS_ENABLE"] == "1"
    assert "NCCL_SOCKET_IFNAME" in v


def test_ib_has_no_gid_and_sharp_adds_collnet() -> None:
    v = _vars(Topology(gpu="a100", nodes=2, nics_per_node=8, nic_gbps=200, transport="ib", sharp=True))
    assert "NCCL_IB_GID_INDEX" not in v
    assert v["NCCL_COLLNET_ENABLE"] == "1"
    assert "NCCL_NVLS_ENABLE" not in v  # Ampere has no NVLS
    assert all(a.reason for a in advise(Topology(gpu="a100")))


def test_lint_flags() -> None:
    env = parse_env_text("export NCCL_IB_DISABLE=1\nNCCL_ALGO=Ring  # experiment\n-x NCCL_IB_GID_INDEX=1\nPATH=/bin")
    rules = {f.rule for f in lint_env(env, "roce")}
    assert {"ib-disabled", "forced-algo", "gid-index-linklocal"} <= rules
    assert "gid-index-on-ib" not in rules
    assert {f.rule for f in lint_env({"NCCL_IB_GID_INDEX": "3"}, "ib")} == {"gid-index-on-ib"}
    assert lint_env({"NCCL_IB_GID_INDEX": "3"}, "roce") == []
    assert lint_env({"NCCL_PROTO": "^LL128"}, None)[0].rule == "forced-proto"


def test_env_file(tmp_path: Path, corpus: Path) -> None:
    # The OCI run's launcher flags are a real environment: GID 3 on RoCE is right, nothing critical.
    cmd = (corpus / "nccl" / "perf" / "h100_oci_bm_gpu_h100_8_2node_roce.txt").read_text().splitlines()[0]
    p = tmp_path / "env"
    p.write_text(cmd)
    env = read_env_file(p)
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert not [f for f in lint_env(env, "roce") if f.severity == "critical"]


def test_lint_rejects_lists_nccl_would_reject() -> None:
    found = lint_env({"NCCL_ALGO": "ring;tree", "NCCL_PROTO": "simple,ll129"})
    bad = [f for f in found if f.rule == "invalid-list"]
    assert {f.var for f in bad} == {"NCCL_ALGO", "NCCL_PROTO"}
    assert all(f.severity == "critical" for f in bad)
    assert not [f for f in lint_env({"NCCL_ALGO": "^NVLS;allreduce:tree,ring"}) if f.rule == "invalid-list"]


def test_advice_conditions() -> None:
    pcie = _vars(Topology(gpu="h100-pcie", nodes=2, gpus_per_node=4, nics_per_node=2, nic_gbps=200))
    assert pcie["NCCL_NVLS_ENABLE"] == "0"
    assert pcie["NCCL_PXN_DISABLE"] == "0" and "NCCL_CROSS_NIC" not in pcie
    efa = _vars(Topology(gpu="h100-sxm", nodes=2, nics_per_node=32, nic_gbps=100, transport="efa"))
    assert efa["FI_PROVIDER"] == "efa" and "NCCL_IB_HCA" not in efa
    single = _vars(Topology(gpu="h200"))
    assert "NCCL_SOCKET_IFNAME" not in single and single["NCCL_NVLS_ENABLE"] == "1"
    reason = next(a.reason for a in advise(Topology(gpu="h200")) if a.var == "NCCL_NVLS_ENABLE")
    assert "GB/s with it" in reason and "?" not in reason
