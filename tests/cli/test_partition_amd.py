"""`gpufleet partition amd ...` and the vendor-aware partition commands on a cluster of three vendors, through the
real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import yaml

from tests.clirun import gpufleet

MIXED = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "examples" / "clusters" / "mixed-vendor.yaml"


def test_modes_table_and_json() -> None:
    run = gpufleet("partition", "amd", "modes", "--gpu", "mi300x", "-o", "json")
    assert run.returncode == 0, run.stderr
    modes = {m["mode"]: m for m in json.loads(run.stdout)["modes"]}
    assert modes["cpx_nps4"]["mixed"] == {"amd.com/cpx_nps4": 64} and modes["cpx_nps4"]["single"] == {"amd.com/gpu": 64}
    assert modes["cpx_nps4"]["memoryMiBEach"] == 24576 and modes["qpx_nps4"]["dcm"] is False
    table = gpufleet("partition", "amd", "modes", "--gpu", "mi355x")
    assert table.returncode == 0 and "cpx_nps2" in table.stdout
    bad = gpufleet("partition", "amd", "modes", "--gpu", "mi210")
    assert bad.returncode == 2 and "cannot be partitioned" in bad.stderr and "Traceback" not in bad.stderr


def test_plan_writes_the_dcm_configmap_and_labels(tmp_path: Path) -> None:
    run = gpufleet("partition", "amd", "plan", "--demand", "cpx=40,gpu=3", "--naming", "mixed", "-o", "json",
                   "--out", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert [n["target"] for n in data["nodes"]] == ["cpx_nps1", "spx_nps1"]  # the fewest nodes: two
    assert data["nodes"][0]["advertised"] == {"amd.com/cpx_nps1": 64}
    assert {p.name for p in tmp_path.iterdir()} == {"dcm-configmap.yaml", "node-labels.yaml", "plan.json"}
    cm = yaml.safe_load((tmp_path / "dcm-configmap.yaml").read_text())
    kubernetes_validate.validate(cm, "1.31", strict=True)
    profiles = json.loads(cm["data"]["config.json"])["gpu-config-profiles"]
    assert profiles["cpx-nps1"]["profiles"] == [
        {"computePartition": "CPX", "memoryPartition": "NPS1", "numGPUsAssigned": 8}
    ]
    labels = yaml.safe_load((tmp_path / "node-labels.yaml").read_text())
    assert labels == {"mi300x-000": {"dcm.amd.com/gpu-config-profile": "cpx-nps1"}}
    wide = gpufleet("partition", "amd", "plan", "--demand", "cpx=40,gpu=3", "-o", "wide")
    assert "kubectl taint nodes mi300x-000 amd-dcm=up:NoExecute" in wide.stdout


def test_plan_on_a_mixed_vendor_cluster_and_its_errors() -> None:
    run = gpufleet("partition", "amd", "plan", "--demand", "cpx_nps4=100", "--cluster", str(MIXED), "-o", "json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert [n["node"] for n in data["nodes"]] == [f"mi300x-00{i}" for i in range(4)]
    assert [n["target"] for n in data["nodes"]].count("cpx_nps4") == 2 and data["nodes"][0]["driverReload"] is True
    qpx = gpufleet("partition", "amd", "plan", "--demand", "qpx=4")
    assert qpx.returncode == 2 and "--kernel-modes" in qpx.stderr and "Traceback" not in qpx.stderr
    kernel = gpufleet("partition", "amd", "plan", "--demand", "qpx=4", "--kernel-modes", "-o", "json")
    assert json.loads(kernel.stdout)["nodes"][0]["dcmProfile"] is None
    bad = gpufleet("partition", "amd", "plan", "--demand", "cpx=4", "--naming", "odd")
    assert bad.returncode == 2 and "unknown naming strategy" in bad.stderr
    mig = gpufleet("partition", "plan", "--demand", "1g.10gb=1", "--cluster", str(MIXED), "--gpu", "mi300x")
    assert mig.returncode == 2 and "does not support MIG" in mig.stderr


def test_discovery_labels_and_dra_for_every_vendor(tmp_path: Path) -> None:
    run = gpufleet("partition", "gfd-labels", "--cluster", str(MIXED), "-o", "json")
    assert run.returncode == 0, run.stderr
    labels = json.loads(run.stdout)
    assert labels["h100-000"]["nvidia.com/gpu.count"] == "8"
    assert labels["mi300x-000"]["amd.com/gpu.product-name"] == "Instinct_MI300X"
    assert labels["gaudi3-000"]["habana.ai/device.type"] == "GAUDI3"
    slices = gpufleet("partition", "dra-slices", "--cluster", str(MIXED))
    assert slices.returncode == 0, slices.stderr
    docs = list(yaml.safe_load_all(slices.stdout))
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"] == [
        "gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com",
    ]  # fmt: skip
    assert {d["spec"]["driver"] for d in docs if d["kind"] == "ResourceSlice"} == {"gpu.nvidia.com", "gpu.amd.com"}
    assert "left out (no DRA driver for their vendor): gaudi3-000" in slices.stderr
    gaudi = gpufleet("partition", "dra-slices", "--cluster", str(MIXED), "--node", "gaudi3-000")
    assert gaudi.returncode == 2 and "Intel Gaudi has no DRA driver" in gaudi.stderr
    claims = tmp_path / "claims.yaml"
    claims.write_text("""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: rocm}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.amd.com
        count: 2
        selectors:
        - cel: {expression: 'device.capacity["gpu.amd.com"].memory.compareTo(quantity("192Gi")) >= 0'}
""")
    run = gpufleet("partition", "dra-allocate", "--claims", str(claims), "--cluster", str(MIXED))
    assert run.returncode == 0, run.stderr
    done = yaml.safe_load(run.stdout)
    results = done["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"]) for r in results] == [("gpu.amd.com", "mi300x-000")] * 2
