"""A GPU's MIG layout and power limit from the node's inventory to the API: each GPU row carries its mode, its GPU
instances by placement, the width of its model's memory-slice axis, its power limit and framebuffer total, and
/openapi.json describes them."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.control import views
from gpufleet.model.observe import GpuInfo, NodeInventory
from gpufleet.sim.runner import run_headless
from gpufleet.sim.scenario import carve_mig
from gpufleet.spec.scenario_spec import MigSpec
from tests import apiclient
from tests.twins import door, small_twin


@pytest.fixture(scope="module")
def plane() -> Any:
    twin = small_twin(nodes=2, job_nodes=1)
    carve_mig(
        twin.cluster,
        [
            MigSpec(nodes=["n-001"], gpus=[0], devices={"2g.20gb": 1, "1g.10gb": 2, "3g.40gb": 1}),
            MigSpec(nodes=["n-001"], gpus=[1], devices={"4g.40gb": 1}),
        ],
        "test",
    )
    twin.set_power_limit("n-001", 2, 500.0)
    plane, fleet = door(twin)
    run_headless(twin, fleet, plane.ingest, plane.tick, 20)  # type: ignore[attr-defined, arg-type]
    return plane


@pytest.fixture(scope="module")
def client(plane: Any) -> Any:
    return apiclient.client(plane)


def test_a_mig_gpus_row_lists_its_instances_by_placement(plane: Any) -> None:
    rows = {r["gpu"]: r for r in views.gpu_rows(plane, "n-001")}
    carved = rows[0]
    assert (carved["mig_mode"], carved["slices"]) == (True, 8)
    placed = [(m["profile"], m["start"], m["size"]) for m in carved["mig"]]
    assert placed == [("1g.10gb", 0, 1), ("1g.10gb", 1, 1), ("2g.20gb", 2, 2), ("3g.40gb", 4, 4)]
    assert [m["gi_id"] for m in carved["mig"]] == [1, 2, 3, 4]
    assert all(m["uuid"].startswith("MIG-") and m["ci_id"] == 0 for m in carved["mig"])
    assert [(m["profile"], m["start"], m["size"]) for m in rows[1]["mig"]] == [("4g.40gb", 0, 4)]
    whole = rows[2]
    assert (whole["mig_mode"], whole["mig"], whole["slices"]) == (False, [], 8)
    assert whole["power_limit_w"] == 500.0 and rows[3]["power_limit_w"] == 700.0
    assert whole["fb_total_mib"] == 81559


def test_the_node_detail_carries_the_same_gpu_rows(plane: Any) -> None:
    detail = views.describe_node(plane, "n-001")
    assert [g["mig"] for g in detail["gpus"]] == [r["mig"] for r in views.gpu_rows(plane, "n-001")]


def test_a_gpu_of_a_model_without_mig_has_no_slices(plane: Any) -> None:
    node = plane.fleet.node("n-000")
    reported = node.inventory
    try:
        node.inventory = NodeInventory(hostname="n-000", gpus=[GpuInfo(0, "GPU-x", "Tesla V100-SXM2-32GB")])
        (row,) = views.gpu_rows(plane, "n-000")
    finally:
        node.inventory = reported
    unknown: dict[str, Any] = {"mig_mode": None, "mig": [], "slices": None, "power_limit_w": None, "fb_total_mib": None}
    assert {k: row[k] for k in unknown} == unknown


def test_the_api_answers_and_describes_the_mig_fields(client: Any) -> None:
    gpus = client.get("/api/v1/gpus", params={"node": "n-001"}).json()
    assert [m["profile"] for m in gpus[0]["mig"]] == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert gpus[0]["slices"] == 8 and gpus[2]["power_limit_w"] == 500.0
    node = client.get("/api/v1/nodes/n-001").json()
    assert node["gpus"][1]["mig"][0]["profile"] == "4g.40gb" and node["gpus"][1]["mig_mode"] is True
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    gpu = spec["GpuRow"]["properties"]
    assert {"mig_mode", "mig", "slices", "power_limit_w", "fb_total_mib"} <= set(gpu)
    assert gpu["mig"]["items"]["$ref"].endswith("/MigInstance")
    assert set(spec["MigInstance"]["properties"]) == {"profile", "gi_id", "start", "size", "uuid", "ci_id"}
    assert all("description" in f for f in spec["MigInstance"]["properties"].values())


def test_the_nvlink_domain_a_gpu_joined_reaches_the_rows_and_describe(plane: Any, client: Any) -> None:
    from gpufleet.cli.render import nvlink_domains

    node = plane.fleet.node("n-000")
    reported = node.inventory
    cluster = "dc6e40c4-d722-4357-9ba6-5291dd461278"
    gpus = [GpuInfo(i, f"GPU-{i}", "NVIDIA GB200", clique_id=2, cluster_uuid=cluster) for i in range(2)]
    try:
        node.inventory = NodeInventory(hostname="n-000", gpus=[*gpus, GpuInfo(2, "GPU-2", "NVIDIA GB200")])
        rows = views.gpu_rows(plane, "n-000")
        api = client.get("/api/v1/nodes/n-000").json()["gpus"]
    finally:
        node.inventory = reported
    assert [(r["clique_id"], r["cluster_uuid"]) for r in rows] == [(2, cluster), (2, cluster), (None, None)]
    assert [g["clique_id"] for g in api] == [2, 2, None] and api[0]["cluster_uuid"] == cluster
    assert nvlink_domains(rows) == f"cluster {cluster} clique 2 (GPUs 0,1)"
    assert nvlink_domains(rows[2:]) == ""
