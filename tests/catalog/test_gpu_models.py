"""The GPU catalog covers the data-centre and workstation GPUs fleets run (Volta through Blackwell), every product
name nvidia-smi prints finds its model, and every fact sits in a plausible range with its source recorded."""

from __future__ import annotations

import pytest

from gpufleet.catalog.gpus import GpuModelSpec, get_gpu_model, load_gpu_models, model_for_product_name
from gpufleet.catalog.mig import mig_geometries

# the list, each by the name an operator would type
FLEET_GPUS = {
    "V100 PCIe 16GB": "v100-pcie-16gb",
    "V100 PCIe 32GB": "v100-pcie-32gb",
    "V100 SXM2 16GB": "v100-16gb",
    "V100 SXM2 32GB": "v100",
    "T4": "t4",
    "A2": "a2",
    "A10": "a10",
    "A16": "a16",
    "A30": "a30",
    "A40": "a40",
    "A100 40GB PCIe": "a100-pcie-40gb",
    "A100 40GB SXM": "a100-40gb",
    "A100 80GB PCIe": "a100-pcie-80gb",
    "A100 80GB SXM": "a100-80gb",
    "A800": "a800-sxm",
    "L4": "l4",
    "L40": "l40",
    "L40S": "l40s",
    "H100 PCIe": "h100-pcie",
    "H100 SXM": "h100-sxm",
    "H100 NVL": "h100-nvl",
    "H800": "h800",
    "H20": "h20",
    "H200": "h200",
    "GH200": "gh200",
    "B100": "b100",
    "B200": "b200",
    "B300": "b300",
    "GB200": "gb200",
    "RTX 6000 Ada": "rtx-6000-ada",
    "RTX PRO 6000 Blackwell": "rtx-pro-6000",
}
REAL = [spec for spec in load_gpu_models().values() if spec.disclosed]


def test_every_fleet_gpu_is_in_the_catalog() -> None:
    missing = {label: key for label, key in FLEET_GPUS.items() if key not in load_gpu_models()}
    assert not missing


@pytest.mark.parametrize("spec", REAL, ids=lambda s: s.name)
def test_every_product_name_finds_its_model(spec: GpuModelSpec) -> None:
    for product in (spec.product_name, *spec.product_names):
        assert model_for_product_name(product) == spec
        assert model_for_product_name(product.upper()) == spec
        assert model_for_product_name("  " + product.replace(" ", "   ") + " ") == spec
        assert model_for_product_name(product.removeprefix("NVIDIA ")) == spec
        assert get_gpu_model(product) == spec


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("#  Rank  0 Group  0 Pid  41 on   node-01 device  0 [0x1b] NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("|   3  NVIDIA A100-SXM4-80GB          On  |   00000000:4B:00.0 Off |", "a100-80gb"),
        ("|   0  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:01:00.0 Off |", "rtx-pro-6000"),
        ("GPU 0: NVIDIA A10 (UUID: GPU-5c1f0a4e-0000-0000-0000-000000000000)", "a10"),  # not the A100
        ("GPU 1: NVIDIA L40 (UUID: GPU-0)", "l40"),  # not the L40S
        ("GPU 2: NVIDIA H200 NVL (UUID: GPU-0)", "h200-nvl"),  # the longest name wins
        ("Tesla V100-SXM2-32GB", "v100"),
    ],
)
def test_a_pasted_line_finds_the_model_it_names(text: str, name: str) -> None:
    spec = model_for_product_name(text)
    assert spec is not None and spec.name == name


@pytest.mark.parametrize("text", ["", "NVIDIA GeForce RTX 4090", "|   0  Tesla V100-SXM2...  On |", "AMD MI300X"])
def test_an_unknown_or_ambiguous_name_finds_nothing(text: str) -> None:
    assert model_for_product_name(text) is None


def test_product_names_and_aliases_are_unique() -> None:
    seen: dict[str, str] = {}
    for spec in load_gpu_models().values():
        for key in (spec.name, spec.product_name.lower(), *(p.lower() for p in spec.product_names), *spec.aliases):
            assert seen.setdefault(key, spec.name) == spec.name, key


@pytest.mark.parametrize("spec", REAL, ids=lambda s: s.name)
def test_facts_are_in_plausible_ranges(spec: GpuModelSpec) -> None:
    assert spec.source, "every entry names where its facts come from"
    assert 8 * 1024 <= spec.memory_mib <= 300 * 1024
    assert 40 <= spec.tdp_w <= 1400 and 0 < spec.idle_w < spec.tdp_w
    assert spec.fp16_dense_tflops > 0 and 0 <= spec.nvlink_gen <= 5 and spec.nvlink_links <= 21
    if spec.nvlink_links and spec.vendor == "nvidia":
        assert spec.nvlink_gen > 0 and spec.nvlink_bw_gbps_per_link > 0
    if spec.nvlink_links:
        assert spec.nvlink_bw_gbps_per_link > 0 and spec.scaleup_kind != "none"
    if spec.nvswitch:
        assert spec.nvlink_links > 0
    if spec.pci_device_id:
        assert spec.pci_device_id.startswith("0x") and len(spec.pci_device_id) == 6
        int(spec.pci_device_id, 16)
    if spec.sm_count is not None:
        assert 8 <= spec.sm_count <= 200
    if spec.max_sm_clock_mhz is not None:
        assert 1000 <= spec.max_sm_clock_mhz <= 3000
    temps = (spec.max_operating_temp_c, spec.slowdown_temp_c, spec.shutdown_temp_c)
    if all(t is not None for t in temps):
        assert temps[0] < temps[1] < temps[2] <= 105  # type: ignore[operator]
    major = spec.compute_major
    assert {"volta": 7, "turing": 7, "ampere": 8, "ada-lovelace": 8, "hopper": 9, "blackwell": 10}.get(
        spec.arch, major
    ) <= major


@pytest.mark.parametrize("spec", REAL, ids=lambda s: s.name)
def test_mig_geometry_only_with_real_profile_data(spec: GpuModelSpec) -> None:
    if spec.mig_geometry is not None:
        assert spec.mig_geometry in mig_geometries()
        assert spec.mig_instances == 7 and spec.pci_device_id
        assert spec.compute_major >= 8
    if spec.mig_instances == 0:
        assert spec.mig_geometry is None


def test_mig_capable_parts_without_a_geometry_say_so() -> None:
    models = load_gpu_models()
    assert (models["a30"].mig_instances, models["a30"].mig_capable) == (4, False)
    assert models["rtx-pro-6000"].mig_instances == 4
    assert models["h20"].mig_geometry == models["gh200"].mig_geometry == "H100-96GB(GH200-96GB/H20)"


def test_facts_nvidia_does_not_publish_are_left_out_not_guessed() -> None:
    b100 = get_gpu_model("b100")
    assert b100.slowdown_temp_c is None and b100.sm_count is None and b100.max_sm_clock_mhz is None
    assert b100.idle_w == round(b100.tdp_w * 0.12)  # the twin's estimate where no capture gives one


@pytest.mark.parametrize(
    ("name", "vendor", "resource", "scaleup"),
    [
        ("h100-sxm", "nvidia", "nvidia.com/gpu", "nvlink"),
        ("mi210", "amd", "amd.com/gpu", "xgmi"),
        ("mi250x", "amd", "amd.com/gpu", "xgmi"),
        ("mi300x", "amd", "amd.com/gpu", "xgmi"),
        ("mi325x", "amd", "amd.com/gpu", "xgmi"),
        ("mi355x", "amd", "amd.com/gpu", "xgmi"),
        ("gaudi2", "intel", "habana.ai/gaudi", "roce"),
        ("gaudi3", "intel", "habana.ai/gaudi", "roce"),
    ],
)
def test_every_vendor_is_data(name: str, vendor: str, resource: str, scaleup: str) -> None:
    spec = get_gpu_model(name)
    assert (spec.vendor, spec.resource, spec.scaleup_kind) == (vendor, resource, scaleup)
    assert spec.vendor_spec.pci_vendor_id.startswith("0x")


def test_product_names_of_other_vendors_resolve() -> None:
    # amd-smi's MARKET_NAME, the AMD node labeller's product-name, hl-smi's AIP name and Gaudi's device.type
    assert model_for_product_name("AMD Instinct MI300X").name == "mi300x"
    assert get_gpu_model("Instinct_MI210").name == "mi210"
    assert model_for_product_name("HL-225").name == "gaudi2"
    assert get_gpu_model("GAUDI3").name == "gaudi3"


def test_partition_modes_are_amds_and_mig_is_nvidias() -> None:
    mi300x = get_gpu_model("mi300x")
    assert mi300x.partition_capable and mi300x.compute_partitions == ("SPX", "DPX", "QPX", "CPX")
    assert not get_gpu_model("mi250x").partition_capable and not get_gpu_model("gaudi3").partition_capable
    with pytest.raises(ValueError, match="NVIDIA's"):
        GpuModelSpec(
            name="x",
            vendor="amd",
            product_name="x",
            arch="x",
            compute_capability="9.0",
            memory_mib=1,
            tdp_w=1,
            pcie_gen=4,
            pcie_width=16,
            scaleup_links=0,
            scaleup_bw_gbps_per_link=0,
            fp16_dense_tflops=1,
        )
