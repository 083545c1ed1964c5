"""The format registry is the one list `gpufleet read` and `gpufleet triage` iterate: both list exactly its formats,
and each format's signs tell a real capture of it, which its parser reads and its judgement (or the format it is
judged as) judges."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpufleet.triage.formats import REGISTRY
from gpufleet.triage.run import triage_lines
from tests.clirun import gpufleet
from tests.conftest import CAPTURES, CORPUS

TRIAGE_DATA = Path(__file__).parent / "data"
IB_DATA = Path(__file__).parent / "readers" / "data" / "ib"
CLOCK_DATA = Path(__file__).parents[1] / "parsers" / "clock" / "data"
WIDE = {"COLUMNS": "200"}

# a real capture of each format, with its provenance beside it (NAME.source.txt naming its thread and version, or the
# folder's README.md naming it)
REAL = {
    "kernel-log": CORPUS / "xid079_dcgm_kmsgtest.log",
    "link-events": CORPUS / "ib_linkflap_syslog_aznhc.log",
    "nhc": CORPUS / "aznhc_health_log_real.txt",
    "nvidia-smi-q": CORPUS / "nvsmi_q_01_a100_ecc_rowremap_stas00.txt",
    "nvidia-smi-table": CAPTURES / "nvml_processes" / "nvsmi_h100_load_exporter.txt",
    "nvidia-smi-nvlink": CORPUS / "nvlink_status_a100_ok_gpud.txt",
    "nvidia-smi-topo": CORPUS / "topo_m_01_a100_nv12_stas00.txt",
    "nvidia-smi-mig": CAPTURES / "nvsmi_mig" / "lgi_lci_a100_mixed.txt",
    "nvidia-device-plugin-log": CAPTURES / "device_plugin" / "xid69_old_wording_k8sdp189.log",
    "nvidia-smi-processes": CAPTURES / "nvml_processes" / "pmon_h100_load_exporter.txt",
    "dcgmi-diag": CORPUS / "dcgmi_diag_fail_01_r3_rowremap_stas00.txt",
    "dcgm-exporter-metrics": CORPUS / "dcgm_exporter_metrics_05_xid_count_pr239.txt",
    "dcgmi-discovery": CAPTURES / "dcgmi_tools" / "discovery_h100_blank_names_dcgm229.txt",
    "dcgmi-dmon": CAPTURES / "dcgmi_tools" / "dmon_smact_na_dcgm423.txt",
    "nvidia-smi-query-gpu": CAPTURES / "nvsmi_query_gpu" / "healthy_rtx2060_smc57.txt",
    "amd-smi": CAPTURES / "amd" / "amd_smi_static_mi300x_blog.txt",
    "rocm-smi": CAPTURES / "amd" / "rocm_smi_concise_mi300x_x4_jax.txt",
    "rocm-smi-topo": CAPTURES / "affinity" / "rocm_smi_showtopo_mi300_msswift.txt",
    "hl-smi": CAPTURES / "gaudi" / "hl_smi_table_gaudi2_x8_loaded.txt",
    "nccl-log": CORPUS / "nccl" / "logs" / "01_ib_completion_status12_roce.log",
    "nccl-tests": CORPUS / "nccl" / "perf" / "h100_aws_p5_2node_efa.txt",
    "nccl-ras": CAPTURES / "nccl_ras" / "ras_2.26.2_allgather_mismatch_nccl1911.txt",
    "ibstat": IB_DATA / "ibstat_ca_ibsim.txt",
    "ibstatus": CAPTURES / "infiniband" / "ibstatus_dgx_4x_edr_cuml.txt",
    "perfquery": CAPTURES / "ibsim" / "perfquery_lid2_port1.txt",
    "ibqueryerrors": CAPTURES / "ibsim" / "ibqueryerrors.txt",
    "iblinkinfo": CAPTURES / "ibsim" / "iblinkinfo.txt",
    "ibnetdiscover": CAPTURES / "ibsim" / "ibnetdiscover.txt",
    "ibv_devinfo": CAPTURES / "infiniband" / "ibv_devinfo_vv_cx6_port_disabled.txt",
    "mlxlink": CAPTURES / "infiniband" / "mlxlink_cx6_ib_hdr_2x.txt",
    "ibdiagnet": CAPTURES / "infiniband" / "ibdiagnet_summary_speed_width_errors.txt",
    "opensm-conf": CAPTURES / "infiniband" / "opensm_3.3.23_create_config.conf",
    "mlnx-qos": CAPTURES / "infiniband" / "mlnx_qos_ofed42_dscp_trust.txt",
    "saquery-smir": CAPTURES / "infiniband" / "saquery_smir_ibsim_two_sms.txt",
    "smpquery-portinfo": CAPTURES / "infiniband" / "smpquery_portinfo_ibsim_ca.txt",
    "ipmitool-sdr": CAPTURES / "bmc" / "sdr_list_full_dell_r320_fans_failed.txt",
    "ipmitool-sel": CAPTURES / "bmc" / "sel_elist_psu_ac_lost_fan_nr.txt",
    "chronyc-tracking": CLOCK_DATA / "chrony_tracking_rockstor2098.txt",
    "ntpq-rv": CLOCK_DATA / "ntpq_rv_tidb_insight57.txt",
    "timedatectl-timesync": CLOCK_DATA / "timesync_status_systemd16492.txt",
    "kubectl-pod-json": CAPTURES / "kubelet_pods" / "kubectl_get_all_kubeadm_docker.json",
    "kubectl-describe-node": CAPTURES / "kubectl" / "describe_node_ocp311_kubevirt.txt",
    "kubectl-node-yaml": CAPTURES / "kubectl" / "node_yaml_status_one_gpu_podman_desktop.txt",
    "kubectl-describe-pod": CAPTURES / "kubectl" / "describe_pod_pending_tf_notebook.txt",
    "kubectl-events": CAPTURES / "kubectl" / "kubectl_events_unbound_pvc_excerpt.txt",
    "app-log": TRIAGE_DATA / "oom" / "app_torch2_rank3_eks.log",
}
# no real capture stored yet: fixtures written from the tool's printing code (or converted from another format's
# capture), their .source.txt saying so in its first words. A real capture moves a format to REAL.
WRITTEN = {
    "dcgmi-health": CAPTURES / "dcgmi_health_failure.txt",
    "partitions-conf": CAPTURES / "infiniband" / "partitions_opensm_man_examples.conf",
    "kubectl-node-json": Path(__file__).parent / "readers" / "data" / "kubectl_node_gpu_healthy.json",
    "kubectl-pod-yaml": Path(__file__).parent / "readers" / "data" / "kubectl_pods_kubeadm_docker.yaml",
}


NOT_CAPTURED = ("Written from", "Written, not captured", "Converted from", "Constructed, not captured")


def _provenance(path: Path) -> str | None:
    """`real`, `written` (its .source.txt says it was written or converted, not captured) or None (none said)."""
    source = path.with_name(path.stem + ".source.txt")
    if source.exists():
        return "written" if source.read_text().startswith(NOT_CAPTURED) else "real"
    readme = path.parent / "README.md"
    return "real" if readme.exists() and path.name in readme.read_text() else None


def test_every_format_has_a_capture_and_every_fixture_says_what_it_is() -> None:
    assert not set(REAL) & set(WRITTEN)
    assert sorted(REAL.keys() | WRITTEN.keys()) == sorted(REGISTRY.names())
    assert {name: _provenance(path) for name, path in REAL.items() if _provenance(path) != "real"} == {}
    assert {name: _provenance(path) for name, path in WRITTEN.items() if _provenance(path) != "written"} == {}


# captures whose .source.txt describes where they came from without an address to open it at (the search that found
# them gave none): each is to get its address, or be replaced, or be labelled as written. The list only shrinks.
NO_ADDRESS_YET = {
    "amd/rocm_smi_concise_mi250x_lumi", "amd/rocm_smi_concise_mi300x_cpx_blog", "amd/rocm_smi_concise_mi300x_loaded",
    "gaudi/hl_smi_csv_gaudi1_slurm_monitor", "gaudi/hl_smi_q_gaudi2_poc", "gaudi/hl_smi_table_gaudi1_dl1",
    "gaudi/hl_smi_table_gaudi2_x8_poc", "infiniband/ibdiagnet_summary_speed_width_errors",
    "infiniband/ibdiagnet_summary_ufm_ar_healthy", "infiniband/ibstatus_dgx_4x_edr_cuml",
    "infiniband/ibv_devinfo_mlx4_port2_down", "infiniband/ibv_devinfo_vv_cx6_port_disabled",
    "infiniband/mlxlink_cx6_counters_grep", "infiniband/mlxlink_cx6_ib_hdr_2x",
    "kubectl/kubectl_events_unbound_pvc_excerpt",
    "nvsmi_mig/lgi_lci_a100_mixed", "nvsmi_mig/lgi_none_a30",
}  # fmt: skip


# a capture of the real tool run here (OpenSM's own dump, infiniband-diags on ibsim): reproducible, not fetched
RUN_HERE = re.compile(r"(?:captured|run) on the test\s+machine")


def test_every_capture_in_the_repository_says_where_it_came_from() -> None:
    """Every .source.txt names a public address for a capture, says it was run here, or says the fixture was
    written (and from what)."""
    unnamed = set()
    for source in sorted(CAPTURES.rglob("*.source.txt")):
        text = source.read_text()
        if not text.startswith(NOT_CAPTURED) and not re.search(r"https?://", text) and not RUN_HERE.search(text):
            unnamed.add(source.relative_to(CAPTURES).as_posix().removesuffix(".source.txt"))
    assert unnamed == NO_ADDRESS_YET


@pytest.mark.parametrize("name", REGISTRY.names())
def test_each_format_is_told_parsed_and_judged(name: str) -> None:
    fmt, path = REGISTRY[name], REAL.get(name) or WRITTEN[name]
    judged = REGISTRY.judged(name)
    text = path.read_text(errors="replace")
    report = triage_lines(text.splitlines(keepends=True), path.name)
    assert report.format == judged.name, f"{path.name} is told as {report.format}"
    forced = triage_lines(text.splitlines(keepends=True), path.name, fmt=name)
    assert forced.format == judged.name
    if judged.judge is None:  # no judgement: what the parser read, and no verdict
        assert report.verdict == "unknown" and len(report.notes) > 1
    if fmt.parse is not None:
        assert fmt.parse(text, source=path.name)
        run = gpufleet("read", name, str(path), "-o", "json")
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)
        assert gpufleet("read", name, str(path)).returncode == 0


def _commands(help_text: str) -> list[str]:
    """The subcommands a `--help` lists in its Commands panel, in order."""
    panel = help_text.split("Commands", 1)[1]
    return re.findall(r"^│ ([a-z0-9][a-z0-9_-]*)\s", panel, re.MULTILINE)


def test_read_lists_exactly_the_formats_with_a_parser() -> None:
    run = gpufleet("read", "--help", env=WIDE)
    assert run.returncode == 0, run.stderr
    assert _commands(run.stdout) == [f.name for f in REGISTRY.readable()]
    judged_only = [f.name for f in REGISTRY if f.parse is None]
    assert judged_only and all(name in run.stdout for name in judged_only)  # named as triage's alone
    # `read nvidia-smi`, from before -q and the table were subcommands of their own, is kept (hidden)
    old = gpufleet("read", "nvidia-smi", str(CORPUS / "nvsmi_table_01_a100_stas00.txt"), "-o", "json")
    assert old.returncode == 0 and json.loads(old.stdout)["gpus"]


def test_triage_lists_exactly_the_registry() -> None:
    run = gpufleet("triage", "--help", env=WIDE)
    assert run.returncode == 0, run.stderr
    listed = re.findall(r"^\s*([a-z0-9][a-z0-9_-]*): ", run.stdout.split("Formats", 1)[1], re.MULTILINE)
    assert listed == list(REGISTRY.names())
    bad = gpufleet("triage", "-F", "tea-leaves", "-", input="x\n")
    assert bad.returncode == 2
    assert re.findall(r"[a-z0-9_-]+", bad.stderr.split("use one of:", 1)[1]) == list(REGISTRY.names())


def test_the_registry_refuses_what_would_make_the_commands_disagree() -> None:
    from gpufleet.triage.formats import Format, Registry

    only = Format("x", "x", parse=lambda text, source: text)
    with pytest.raises(ValueError, match="twice"):
        Registry((only, only))
    with pytest.raises(ValueError, match="judged as"):
        Registry((Format("y", "y", parse=lambda text, source: text, judged_as="nothing"),))
    with pytest.raises(ValueError, match="neither"):
        Registry((Format("z", "z"),))
