import pytest

from gpufleet.catalog import (
    get_gpu_model,
    load_dcgm_fields,
    load_gpu_models,
    load_ib_counters,
    load_mig_profiles,
    load_xid_catalog,
    mig_profiles_for,
)
from gpufleet.catalog.mig import MEMORY_SLICES
from gpufleet.errors import NotFoundError

REQUIRED = ["v100", "t4", "a10", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h100-nvl", "h200", "b200", "l40s"]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_models_are_physically_consistent(name: str) -> None:
    spec = get_gpu_model(name)
    assert 0 < spec.idle_w < spec.tdp_w
    temps = (spec.max_operating_temp_c, spec.slowdown_temp_c, spec.shutdown_temp_c)
    assert None not in temps and temps == tuple(sorted(temps))  # type: ignore[type-var]
    assert len(set(temps)) == 3
    assert spec.memory_mib > 10_000
    if spec.nvswitch:
        assert spec.nvlink_links > 0
    if spec.mig_capable:
        assert spec.mig_geometry is not None
        assert mig_profiles_for(spec.mig_geometry)


def test_lookup_by_alias_and_product_name() -> None:
    assert get_gpu_model("H100").name == "h100-sxm"
    assert get_gpu_model("NVIDIA H100 80GB HBM3").name == "h100-sxm"
    assert get_gpu_model("v100m16").name == "v100-16gb"


def test_unknown_model_names_the_choices() -> None:
    with pytest.raises(NotFoundError) as err:
        get_gpu_model("h1000")
    assert "h100-sxm" in (err.value.fix or "")


def test_mig_only_on_ampere_and_newer_datacenter_parts() -> None:
    capable = {n for n, s in load_gpu_models().items() if s.mig_capable}
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h100-nvl", "h200", "b200"} <= capable
    assert not {"v100", "t4", "a10", "l40s"} & capable


def test_mig_placements_match_nvidia_smi_lgipp_on_h100() -> None:
    h100 = mig_profiles_for("H100-SXM5-80GB")
    assert h100["1g.10gb"].starts == (0, 1, 2, 3, 4, 5, 6) and h100["1g.10gb"].size == 1
    assert h100["1g.20gb"].starts == (0, 2, 4, 6) and h100["1g.20gb"].size == 2
    assert h100["3g.40gb"].starts == (0, 4) and h100["3g.40gb"].size == 4
    assert h100["7g.80gb"].starts == (0,) and h100["7g.80gb"].size == 8
    assert h100["1g.10gb"].resource_name == "nvidia.com/mig-1g.10gb"
    assert h100["1g.10gb+me"].resource_name == "nvidia.com/mig-1g.10gb.me"


def test_every_mig_placement_fits_the_memory_slices() -> None:
    for profile in load_mig_profiles():
        for start in profile.starts:
            assert start + profile.size <= MEMORY_SLICES, profile
        assert profile.compute_slices <= 7


def test_xid_catalog_covers_1_to_172_with_nvidia_actions() -> None:
    cat = load_xid_catalog()
    assert set(range(1, 173)) == set(cat)
    assert cat[79].nvidia_immediate_action == "RESTART_BM" and cat[79].fatal
    assert cat[48].nvidia_immediate_action == "WORKFLOW_XID_48"
    assert cat[13].nvidia_immediate_action == "RESTART_APP" and not cat[13].fatal


def test_dcgm_exporter_default_counters() -> None:
    fields = {f.name: f for f in load_dcgm_fields()}
    enabled = [f for f in fields.values() if f.enabled_by_default]
    assert len(enabled) == 26  # dcgm-exporter's default-counters.csv at the pinned commit
    assert fields["DCGM_FI_DEV_GPU_TEMP"].prom_type == "gauge"
    assert not fields["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"].enabled_by_default
    assert fields["DCGM_FI_DRIVER_VERSION"].prom_type == "label"


def test_ib_counters() -> None:
    counters = load_ib_counters()
    assert counters["SymbolErrorCounter"].bits == 16
    assert counters["SymbolErrorCounter"].saturation == 65535
    assert counters["PortXmitData"].octets_div4
    assert counters["PortXmitDiscards"].cause == "congestion"
    assert all(c.metric.endswith("_total") for c in counters.values())


def test_xid_causes_and_messages_name_catalog_codes() -> None:
    from gpufleet.catalog.xid import load_xid_catalog, xid_causes, xid_message, xid_messages
    from gpufleet.model import RootCause

    catalog = load_xid_catalog()
    assert {RootCause(cause) for cause in xid_causes().values()} >= {RootCause.gpu_lost, RootCause.nvlink}
    assert set(xid_causes()) <= set(catalog) and set(xid_messages()) <= set(catalog)
    assert "fallen off the bus" in xid_message(79)
    unlisted = next(code for code in catalog if code not in xid_messages())
    assert xid_message(unlisted) == catalog[unlisted].description
