"""`gpufleet partition ...` through the real entry point: MIG layout plans, device-plugin configs, DRA slices and
claim allocation, checked against the Kubernetes schemas."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import yaml

from gpufleet.sched.partition.device_plugin import load_config
from tests.clirun import gpufleet
from tests.sched.test_dra import BIG_GPU, K8S


def test_cli_plan_layouts_and_device_plugin_config(tmp_path: Path) -> None:
    run = gpufleet("partition", "plan", "--demand", "1g.10gb=60,3g.40gb=10,gpu=20", "--gpu", "h100-sxm", "-o", "json",
                   "--out", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert (data["gpusUsed"], data["lowerBound"], data["optimal"]) == (33, 33, True)
    assert data["devicePluginConfig"]["flags"]["migStrategy"] == "mixed"
    assert {p.name for p in tmp_path.iterdir()} == {
        "mig-parted-config.yaml", "node-labels.yaml", "configmaps.yaml", "plan.json",
    }  # fmt: skip
    for cm in yaml.safe_load_all((tmp_path / "configmaps.yaml").read_text()):
        kubernetes_validate.validate(cm, "1.30.0", strict=True)
    run = gpufleet("partition", "layouts", "--gpu", "h100-sxm", "-o", "json")
    assert json.loads(run.stdout)["validPlacements"] == 2319
    run = gpufleet("partition", "device-plugin-config", "--time-slicing", "4", "--rename")
    config = load_config(run.stdout)
    assert config.sharing.shared_name("nvidia.com/gpu") == "nvidia.com/gpu.shared"
    run = gpufleet("partition", "plan", "--demand", "2g.10gb=1", "--gpu", "h100-sxm")
    assert run.returncode == 2 and "no MIG profile '2g.10gb'" in run.stderr and "Traceback" not in run.stderr


def test_cli_publishes_slices_and_allocates_claims(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "examples" / "clusters"
    claims = tmp_path / "claims.yaml"
    claims.write_text(BIG_GPU)
    cmd = ["partition", "dra-allocate", "--claims", str(claims),
           "--cluster", str(examples / "mixed-fleet.yaml"), "--node", "h100-003"]  # fmt: skip
    run = gpufleet(*cmd)
    assert run.returncode == 0, run.stderr
    done = yaml.safe_load(run.stdout)
    kubernetes_validate.validate(done, K8S, strict=True)
    assert done["metadata"]["name"] == "big-gpu-0"
    assert done["status"]["allocation"]["devices"]["results"][0]["pool"] == "h100-003"
    cmd[1:] = ["dra-slices", "--cluster", str(examples / "mixed-fleet.yaml"), "--node", "t4-000"]
    run = gpufleet(*cmd)
    docs = list(yaml.safe_load_all(run.stdout))
    assert [d["kind"] for d in docs] == ["DeviceClass", "DeviceClass", "ResourceSlice"]
    assert docs[2]["spec"]["devices"][0]["attributes"]["productName"] == {"string": "Tesla T4"}


def test_cli_gfd_labels_follow_the_device_plugin_config(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "examples" / "clusters"
    config = tmp_path / "plugin.yaml"
    config.write_text(gpufleet("partition", "device-plugin-config", "--time-slicing", "4").stdout)
    run = gpufleet(
        "partition", "gfd-labels", "--cluster", str(examples / "mixed-fleet.yaml"), "--node", "t4-000",
        "--config", str(config), "-o", "json",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    labels = json.loads(run.stdout)["t4-000"]
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED" and labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    missing = gpufleet("partition", "gfd-labels", "--cluster", str(examples / "mixed-fleet.yaml"), "--config", "nope")
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
