"""The nvidia-smi readers: `-q`, the table, `nvlink -s` and `topo -m`, on the corpus captures and on fixtures
written by hand in the shapes nvidia-smi prints, including the values it prints when it cannot read one.

Fixtures (data/), each laid out as the driver named prints it; values are made up:
- nvsmi_q_h100_full.txt: `nvidia-smi -q`, one H100 SXM, driver 550 section and key names.
- nvsmi_q_h100_reset_required.txt: `nvidia-smi -q -d ECC,TEMPERATURE,POWER`, GPU 1 printing `[GPU requires reset]`
  (NVML_ERROR_RESET_REQUIRED) as after an Xid 119/154.
- nvsmi_table_a40_err.txt: driver 515 table, GPU 4 all `ERR!` (the shape of public captures of a GSP timeout).
- nvsmi_table_h100_err_gsp.txt: driver 550 table, GPU 5 with fan and MIG `ERR!` and power/ECC/util N/A (the shape
  of a public capture after Xid 119 + 154 "GPU Reset Required").
- nvsmi_table_geforce_fan_err.txt: driver 515 table, a GeForce whose fan reads `ERR!` and whose ECC cell is `Off`.
- nvsmi_table_a100_ecc_off.txt: driver 535 table, two A100 SXM, GPU 1 with ECC `Off`.
- nvlink_h100_two_inactive.txt: `nvidia-smi nvlink -s`, 8 H100 at 26.562 GB/s per link, GPU 3 links 5 and 11
  `<inactive>`.
- topo_h100_gpu1_off_nvlink.txt: `nvidia-smi topo -m` of an 8-GPU, 8-NIC H100 node (tab-separated, NIC legend)
  where GPU1 reaches the others over NODE/SYS only.
- topo_v100_dgx1_hybrid_mesh.txt: `topo -m` of a DGX-1 V100 hybrid cube mesh (NV1/NV2, SYS across sockets).
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from gpufleet.triage.formats import read
from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines, triage_stream
from tests.conftest import CORPUS

DATA = Path(__file__).parent / "data"

# fixture -> (format, verdict, codes it must find)
FIXTURES = {
    "nvsmi_q_h100_full.txt": ("nvidia-smi-q", "healthy", set()),
    "nvsmi_q_h100_reset_required.txt": ("nvidia-smi-q", "faulty", {"GPU requires reset"}),
    "nvsmi_table_a40_err.txt": ("nvidia-smi-table", "faulty", {"ERR!"}),
    "nvsmi_table_h100_err_gsp.txt": ("nvidia-smi-table", "faulty", {"ERR!"}),
    "nvsmi_table_geforce_fan_err.txt": ("nvidia-smi-table", "degraded", {"ERR!"}),
    "nvsmi_table_a100_ecc_off.txt": ("nvidia-smi-table", "degraded", {"ECC disabled"}),
    "nvlink_h100_two_inactive.txt": ("nvidia-smi-nvlink", "degraded", {"NVLink inactive links"}),
    "topo_h100_gpu1_off_nvlink.txt": ("nvidia-smi-topo", "degraded", {"NVLink down"}),
    "topo_v100_dgx1_hybrid_mesh.txt": ("nvidia-smi-topo", "healthy", set()),
}
CORPUS_EXPECTED = {
    "nvsmi_q_01_a100_ecc_rowremap_stas00.txt": ("nvidia-smi-q", "degraded", {"row remap pending"}),
    "nvsmi_q_02_sram_uncorrectable_stas00.txt": ("nvidia-smi-q", "faulty", {"volatile uncorrectable ECC"}),
    # 63 to 65 retired pages on four of its GPUs: at or over DCGM's limit of 63, as the GPU detector judges them
    "nvsmi_q_03_retired_pages_bad_aznhc.txt": (
        "nvidia-smi-q",
        "faulty",
        {"retired pages over limit", "page retirement pending"},
    ),
    "nvsmi_q_04_retired_pages_good_aznhc.txt": ("nvidia-smi-q", "healthy", set()),
    "nvsmi_table_01_a100_stas00.txt": ("nvidia-smi-table", "unknown", set()),  # cut after GPU 0
    "nvlink_status_a100_ok_gpud.txt": ("nvidia-smi-nvlink", "healthy", set()),
    "nvlink_status_all_inactive_aznhc.txt": ("nvidia-smi-nvlink", "faulty", {"NVLink down"}),
    "topo_m_01_a100_nv12_stas00.txt": ("nvidia-smi-topo", "healthy", set()),
    "topo_m_02_h100_nv18_stas00.txt": ("nvidia-smi-topo", "healthy", set()),
}


def _triage(text: str) -> TriageReport:
    return triage_lines(io.StringIO(text), "test")


def _corpus(name: str) -> str:
    path = CORPUS / name
    return path.read_text(errors="replace")


def _check(report: TriageReport, want: tuple[str, str, set[str]]) -> None:
    fmt, verdict, codes = want
    assert (report.format, report.verdict) == (fmt, verdict), report.as_dict()
    assert codes <= {f.code for f in report.findings}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixtures(name: str) -> None:
    _check(_triage((DATA / name).read_text()), FIXTURES[name])


@pytest.mark.parametrize("name", sorted(CORPUS_EXPECTED))
def test_real_captures(name: str) -> None:
    _check(_triage(_corpus(name)), CORPUS_EXPECTED[name])


# -- -q ----------------------------------------------------------------------------------------------------------
FULL_Q = (DATA / "nvsmi_q_h100_full.txt").read_text()


def _q(old: str, new: str) -> TriageReport:
    assert old in FULL_Q
    return _triage(FULL_Q.replace(old, new))


def test_requires_reset_is_critical_with_the_lines_as_evidence() -> None:
    report = _triage((DATA / "nvsmi_q_h100_reset_required.txt").read_text())
    (finding,) = report.findings
    assert finding.entity == "GPU 1 0000:97:00" and finding.severity == "critical"
    assert "nvidia-smi -r" in finding.fix and "ECC Errors, Temperature, GPU Power Readings" in finding.message
    assert finding.evidence and all("[GPU requires reset]" in line for line in finding.evidence)


def test_one_unknown_error_is_a_warning_naming_the_field() -> None:
    report = _q(
        "Fan Speed                             : N/A", "Fan Speed                             : [Unknown Error]"
    )
    (finding,) = report.findings
    assert (report.verdict, finding.severity, finding.code) == ("degraded", "warning", "unreadable value")
    assert "Fan Speed" in finding.message and finding.evidence == [
        "Fan Speed                             : [Unknown Error]"
    ]


def test_err_on_the_gpus_own_readings_is_critical() -> None:
    text = FULL_Q.replace("GPU Current Temp                  : 31 C", "GPU Current Temp                  : ERR!")
    text = text.replace("Power Draw                        : 69.87 W", "Power Draw                        : ERR!")
    report = _triage(text)
    assert report.verdict == "faulty"
    (finding,) = report.findings
    assert finding.code == "ERR!" and "Temperature/GPU Current Temp" in finding.message
    assert len(finding.evidence) == 2


def test_gpu_is_lost_is_critical() -> None:
    report = _q("Gpu                               : 0 %", "Gpu                               : [GPU is lost]")
    assert report.verdict == "faulty" and report.findings[0].code == "GPU is lost"


@pytest.mark.parametrize("value", ["N/A", "[N/A]", "[Not Supported]", "[Insufficient Permissions]", "Not Supported"])
def test_not_available_is_not_a_fault(value: str) -> None:
    report = _q("Power Draw                        : 69.87 W", f"Power Draw                        : {value}")
    assert report.verdict == "healthy" and not report.findings


def test_ecc_disabled_on_a_data_centre_gpu_is_a_warning_with_the_fix() -> None:
    text = FULL_Q.replace("Current                           : Enabled", "Current                           : Disabled")
    text = text.replace("Pending                           : Enabled", "Pending                           : Disabled")
    for counter in ("SRAM Correctable              : 0", "DRAM Uncorrectable            : 0"):
        text = text.replace(counter, counter[:-1] + "N/A")
    report = _triage(text)
    (finding,) = report.findings
    assert (report.verdict, finding.code) == ("degraded", "ECC disabled")
    assert "nvidia-smi -e 1" in finding.fix and "reboot" in finding.fix


def test_a_pending_ecc_change_is_a_warning() -> None:
    report = _q("Current                           : Enabled", "Current                           : Disabled")
    assert report.verdict == "degraded" and [f.code for f in report.findings] == ["ECC mode pending"]
    report = _q("Pending                           : Enabled", "Pending                           : Disabled")
    assert [f.code for f in report.findings] == ["ECC mode pending"]


def test_ecc_off_on_a_geforce_is_not_a_fault() -> None:
    text = FULL_Q.replace("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090")
    text = text.replace("Current                           : Enabled", "Current                           : Disabled")
    text = text.replace("Pending                           : Enabled", "Pending                           : Disabled")
    assert _triage(text).verdict == "healthy"


def test_a_q_cut_inside_a_section_is_unknown_and_says_so() -> None:
    cut = FULL_Q[: FULL_Q.index("            DRAM Correctable              : 0")]
    report = _triage(cut)
    assert report.verdict == "unknown" and any("ends mid-record" in n for n in report.notes)


def test_a_q_cut_before_its_processes_entry_is_unknown_when_nothing_is_wrong() -> None:
    report = _triage(FULL_Q[: FULL_Q.index("    Temperature")])
    assert report.verdict == "unknown" and any("Processes" in n for n in report.notes)


def test_a_q_cut_mid_record_with_something_critical_is_still_faulty() -> None:
    text = FULL_Q.replace("SRAM Uncorrectable Parity     : 0", "SRAM Uncorrectable Parity     : 2", 1)
    cut = text[: text.index("            SRAM Uncorrectable SEC-DED    : 0")]
    assert _triage(cut).verdict == "faulty"


EXCERPT = """\
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 0
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 12
            DRAM Uncorrectable            : 0
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 1
        Pending                           : Yes
        Remapping Failure Occurred        : No

GPU 00000000:...
    Product Name                          : NVIDIA A100-SXM4-80GB
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 0
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 0
"""


def test_an_excerpt_starting_mid_record_with_a_redacted_pci_id_is_read() -> None:
    report = _triage(EXCERPT)
    assert report.format == "nvidia-smi-q" and report.verdict == "degraded"
    assert [f.code for f in report.findings] == ["row remap pending", "remapped rows"]


def test_a_dedented_excerpt_is_read() -> None:
    block = FULL_Q[FULL_Q.index("    ECC Errors\n") : FULL_Q.index("        Aggregate Uncorrectable SRAM Sources")]
    dedented = "\n".join(line[4:] for line in block.splitlines()).replace(
        "SRAM Uncorrectable SEC-DED    : 0", "SRAM Uncorrectable SEC-DED    : 3"
    )
    assert dedented.startswith("ECC Errors\n    Volatile")
    report = _triage(dedented + "\n")
    assert report.format == "nvidia-smi-q" and report.verdict == "faulty"


def test_a_value_that_does_not_read_is_noted_not_fatal() -> None:
    report = _q("Pending                           : No", "Pending                           : Maybe")
    assert report.verdict == "unknown" and any("did not read" in n for n in report.notes)
    report = _q("Pending                           : No", "Pending                           : Yes")
    assert report.verdict == "degraded"


def test_xml_with_a_reset_required_gpu() -> None:
    xml = (
        '<?xml version="1.0" ?>\n<nvidia_smi_log>\n<attached_gpus>1</attached_gpus>\n'
        '<gpu id="00000000:97:00.0">\n<product_name>NVIDIA H100 80GB HBM3</product_name>\n'
        "<temperature>\n<gpu_temp>[GPU requires reset]</gpu_temp>\n</temperature>\n"
        "<ecc_mode><current_ecc>Disabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>\n"
        "</gpu>\n</nvidia_smi_log>\n"
    )
    report = _triage(xml)
    assert report.format == "nvidia-smi-q" and report.verdict == "faulty"
    assert {f.code for f in report.findings} == {"GPU requires reset", "ECC mode pending"}


# -- the table ---------------------------------------------------------------------------------------------------
def test_table_err_rows_are_the_evidence() -> None:
    report = _triage((DATA / "nvsmi_table_a40_err.txt").read_text())
    (finding,) = report.findings
    assert finding.entity == "GPU 4 0000:81:00" and len(finding.evidence) == 3
    assert all("ERR!" in line for line in finding.evidence)


def test_table_gsp_hang_shape_fan_and_mig_err() -> None:
    (finding,) = _triage((DATA / "nvsmi_table_h100_err_gsp.txt").read_text()).findings
    assert finding.severity == "critical" and "Fan" in finding.message and "MIG M." in finding.message


def test_table_cut_inside_a_gpu_block_is_unknown() -> None:
    text = (DATA / "nvsmi_table_a100_ecc_off.txt").read_text()
    lines = text.splitlines(keepends=True)
    first_row = next(i for i, line in enumerate(lines) if line.startswith("|   0  "))
    report = _triage("".join(lines[: first_row + 1]))
    assert report.verdict == "unknown" and any("GPU 0's rows" in n for n in report.notes)


def test_table_with_a_redacted_bus_id_is_read() -> None:
    text = (DATA / "nvsmi_table_a40_err.txt").read_text().replace("00000000:81:00.0", "0000000X:XX:XX.X")
    text = text.replace("00000000:01:00.0", "        ...     ")
    assert _triage(text).verdict == "faulty"


def test_table_of_several_gpus_without_its_process_table_may_be_cut() -> None:
    text = (DATA / "nvsmi_table_a40_err.txt").read_text()
    healthy_part = text[: text.index("|   4  ERR!")]
    report = _triage(healthy_part)
    assert report.verdict == "unknown" and any("process table" in n for n in report.notes)


# -- nvlink -s ---------------------------------------------------------------------------------------------------
def _nvlink(*gpus: tuple[str, list[str]]) -> TriageReport:
    lines = []
    for i, (name, states) in enumerate(gpus):
        lines.append(f"GPU {i}: {name} (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)")
        lines += [f"\t Link {n}: {state}" for n, state in enumerate(states)]
    return _triage("\n".join(lines) + "\n")


H100 = "NVIDIA H100 80GB HBM3"


def test_nvlink_all_links_listed_inactive_on_an_sxm_part_is_faulty() -> None:
    report = _nvlink(
        *[(H100, ["26.562 GB/s"] * 18)] * 3, (H100, ["<inactive>"] * 18), *[(H100, ["26.562 GB/s"] * 18)] * 4
    )
    (finding,) = report.findings
    assert (report.verdict, finding.code, finding.entity) == ("faulty", "NVLink down", f"GPU 3 ({H100})")
    assert "fabricmanager" in finding.fix


def test_nvlink_slow_links_are_degraded() -> None:
    states = ["26.562 GB/s"] * 16 + ["13.281 GB/s"] * 2
    report = _nvlink(*[(H100, ["26.562 GB/s"] * 18)] * 7, (H100, states))
    (finding,) = report.findings
    assert (report.verdict, finding.code) == ("degraded", "NVLink slow links")
    assert "link 16 at 13.281 GB/s" in finding.message and finding.evidence[-1].endswith("Link 17: 13.281 GB/s")


def test_nvlink_a_gpu_listing_fewer_links_than_its_model_is_degraded() -> None:
    report = _nvlink(
        *[(H100, ["26.562 GB/s"] * 18)] * 3, (H100, ["26.562 GB/s"] * 12), *[(H100, ["26.562 GB/s"] * 18)] * 4
    )
    assert report.verdict == "degraded" and report.findings[0].code == "NVLink links missing"


def test_nvlink_the_last_gpu_listing_fewer_links_may_be_cut() -> None:
    report = _nvlink(*[(H100, ["26.562 GB/s"] * 18)] * 7, (H100, ["26.562 GB/s"] * 12))
    assert report.verdict == "unknown" and not report.findings


def test_nvlink_err_link_state_is_a_warning() -> None:
    report = _nvlink(*[(H100, ["26.562 GB/s"] * 18)] * 7, (H100, ["26.562 GB/s"] * 17 + ["ERR!"]))
    assert report.verdict == "degraded" and "link 17 (ERR!)" in report.findings[0].message


def test_nvlink_pcie_card_without_bridges_is_not_a_fault() -> None:
    text = (
        "GPU 0: NVIDIA A100-PCIE-40GB (UUID: GPU-3fb142e7-7102-c7ac-bd5a-fc829e11ed84)\n"
        "NVML: Unable to retrieve NVLink information as all links are inActive\n"
        "GPU 1: NVIDIA A100-PCIE-40GB (UUID: GPU-14ac2834-0d81-0508-69eb-e25264c08d21)\n"
        "NVML: Unable to retrieve NVLink information as all links are inActive\n"
    )
    report = _triage(text)
    assert report.format == "nvidia-smi-nvlink" and report.verdict == "healthy" and not report.findings


def test_nvlink_unknown_model_without_links_cannot_be_judged() -> None:
    text = "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1)\nDevice does not have or support Nvlink\n"
    assert read("nvidia-smi-nvlink", iter(text.splitlines()), "t").verdict == "unknown"


def test_nvlink_a_listing_of_sxm_gpus_short_of_a_board_may_be_cut() -> None:
    report = _nvlink(*[(H100, ["26.562 GB/s"] * 18)] * 3)
    assert report.verdict == "unknown" and any("SXM boards carry" in n for n in report.notes)


# -- topo -m -----------------------------------------------------------------------------------------------------
TOPO_OFF = (DATA / "topo_h100_gpu1_off_nvlink.txt").read_text()


def test_topo_a_gpu_off_the_nvlink_mesh_with_the_model_named_is_faulty() -> None:
    names = "".join(f"GPU {i}: {H100} (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n" for i in range(8))
    report = _triage(TOPO_OFF + "\n$ nvidia-smi -L\n" + names)
    assert report.format == "nvidia-smi-topo" and report.verdict == "faulty"
    (finding,) = report.findings
    assert finding.entity == "GPU1" and finding.evidence[0].startswith("GPU1")


def _matrix(links: dict[tuple[int, int], str], gpus: int) -> str:
    rows = ["\t" + "\t".join(f"GPU{i}" for i in range(gpus)) + "\tCPU Affinity\tNUMA Affinity"]
    for a in range(gpus):
        cells = [" X " if a == b else links.get((min(a, b), max(a, b)), "NV18") for b in range(gpus)]
        rows.append(f"GPU{a}\t" + "\t".join(cells) + "\t0-51\t0")
    return "\n".join(rows) + "\n"


def test_topo_mixed_counts_in_a_full_mesh_name_the_pairs() -> None:
    report = _triage(_matrix({(2, 3): "NV17", (0, 5): "NV16"}, 8))
    (finding,) = report.findings
    assert report.verdict == "degraded" and finding.code == "NVLink links missing"
    assert "GPU0-GPU5 NV16" in finding.message and "GPU2-GPU3 NV17" in finding.message
    assert _triage(_matrix({}, 8)).verdict == "healthy"


def test_topo_a_gpu_without_a_near_nic_is_a_warning() -> None:
    text = TOPO_OFF.replace(
        "NODE\tNODE\tNODE\tPIX\tSYS\tSYS\tSYS\tSYS\t0-55", "NODE\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t0-55"
    )
    report = _triage(text)
    assert {f.code for f in report.findings} == {"NVLink down", "NIC affinity"}
    nic = next(f for f in report.findings if f.code == "NIC affinity")
    assert nic.entity == "GPU3" and "GPU3 (NODE)" in nic.message


def test_topo_without_nvlink_and_without_a_model_is_unknown() -> None:
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNODE\t28-55\t1\t\tN/A\nGPU1\tNODE\t X \t28-55\t1\t\tN/A\n"
    )
    report = _triage(text)
    assert report.format == "nvidia-smi-topo" and report.verdict == "unknown"
    assert any("not judged" in n for n in report.notes)


def test_topo_cut_before_its_last_rows_is_unknown() -> None:
    text = _corpus("topo_m_01_a100_nv12_stas00.txt")
    report = _triage(text[: text.index("GPU6  NV12")])
    assert report.verdict == "unknown" and any("GPU6, GPU7" in n for n in report.notes)


def test_topo_with_single_spaced_columns_is_read() -> None:
    text = (
        "GPU0 GPU1 NIC0 CPU Affinity NUMA Affinity GPU NUMA ID\n"
        "GPU0 X NV4 PIX 0-15 0 N/A\nGPU1 NV4 X NODE 0-15 0 N/A\nNIC0 PIX NODE X\n"
    )
    report = _triage(text)
    assert report.format == "nvidia-smi-topo" and {f.code for f in report.findings} == {"NIC affinity"}


# -- robustness --------------------------------------------------------------------------------------------------
def _inputs() -> list[tuple[str, bytes]]:
    files = [DATA / name for name in FIXTURES]
    files += [CORPUS / name for name in CORPUS_EXPECTED]
    return [(path.name, path.read_bytes()) for path in files]


@pytest.mark.parametrize("name", sorted(FIXTURES) + sorted(CORPUS_EXPECTED))
def test_a_cut_never_gets_a_different_confident_verdict(name: str) -> None:
    """Cut at every line and at random characters: the full verdict or unknown, never healthy for a bad input."""
    path = DATA / name if name in FIXTURES else CORPUS / name
    text = path.read_text(errors="replace")
    full = _triage(text).verdict
    lines = text.splitlines(keepends=True)
    rng = random.Random(name)
    cuts = ["".join(lines[:k]) for k in range(len(lines))] + [text[: rng.randrange(len(text))] for _ in range(60)]
    for cut in cuts:
        report = _triage(cut)
        assert report.verdict in (full, "unknown"), (name, full, report.verdict, cut[-160:])


def test_seeded_fuzz_never_raises() -> None:
    """Mutated bytes, dropped lines, absurd numbers and junk: a report every time, and a cut never turns a bad
    input healthy."""
    rng = random.Random(12)
    inputs = _inputs()
    formats = ("nvidia-smi-q", "nvidia-smi-table", "nvidia-smi-nvlink", "nvidia-smi-topo")
    for k in range(400):
        name, raw = rng.choice(inputs)
        data = bytearray(raw)
        kind = rng.randrange(4)
        if kind == 0:
            for _ in range(rng.randint(1, 30)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:
            lines = bytes(data).splitlines(keepends=True)
            data = bytearray(b"".join(line for line in lines if rng.random() > 0.2))
        elif kind == 2:
            data += b"    Power Draw : 1e400 W\n\tLink 9: " + b"9" * 5000 + b" GB/s\nGPU" + b"9" * 5000 + b" NV99999\n"
            data += b"GPU0 X NV" + b"9" * 5000 + b" 0-99999999999\n\x00\xff\xfe\n" + b"    " * 2000 + b"x : y\n"
        fmt = rng.choice((None, *formats))
        full = triage_stream(io.BytesIO(bytes(data)), f"fuzz-{k}", fmt)
        assert full.verdict in ("healthy", "degraded", "faulty", "unknown")
        cut = triage_stream(io.BytesIO(bytes(data[: rng.randrange(len(data) + 1)])), f"cut-{k}", full.format)
        if full.verdict in ("faulty", "degraded") and kind != 0 and full.format != "unknown":
            assert cut.verdict != "healthy", (name, k)


@pytest.mark.parametrize("fmt", ["nvidia-smi-q", "nvidia-smi-table", "nvidia-smi-nvlink", "nvidia-smi-topo"])
@pytest.mark.parametrize("text", ["", "x", "\x00\xff", "GPU 0:\n", "GPU0\n", "| 0 |\n", "    " * 5000 + "a : b"])
def test_odd_inputs_are_reports(fmt: str, text: str) -> None:
    assert read(fmt, iter(text.splitlines()), "odd").verdict in ("healthy", "degraded", "faulty", "unknown")


def test_deep_indentation_stays_bounded() -> None:
    text = "GPU 00000000:01:00.0\n" + "".join(" " * i + f"S{i}\n" for i in range(1, 3000)) + " " * 3000 + "k : v\n"
    report = read("nvidia-smi-q", iter(text.splitlines()), "deep")
    assert report.verdict == "unknown"


def test_ecc_disabled_without_a_model_name_is_still_a_warning() -> None:
    text = (
        "GPU 00000000:07:00.0\n    ECC Mode\n        Current                           : Disabled\n"
        "        Pending                           : Disabled\n    ECC Errors\n        Volatile\n"
        "            SRAM Correctable              : N/A\n            DRAM Uncorrectable            : N/A\n"
        "        Aggregate\n            SRAM Correctable              : N/A\n"
        "            DRAM Uncorrectable            : N/A\n"
    )
    report = read("nvidia-smi-q", iter(text.splitlines()), "ecc")
    assert report.verdict == "degraded" and [f.code for f in report.findings] == ["ECC disabled"]
    assert "does not name" in report.findings[0].message
