"""nccl-tests output through triage: told by content, judged as `gpufleet nccl compare` judges it."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from gpufleet.triage.formats import read
from gpufleet.triage.readers import nccl as nccl_reader
from gpufleet.triage.run import triage_lines, triage_stream
from tests.conftest import CORPUS

DATA = Path(__file__).resolve().parent / "data"
PERF = CORPUS / "nccl" / "perf"
FIXTURES = sorted(DATA.glob("nccl_tests_*.txt"))

# fixture -> (verdict, codes)
EXPECTED = {
    "nccl_tests_a100_allreduce_8gpu.txt": ("healthy", []),
    "nccl_tests_h100_allgather_slow.txt": ("degraded", ["low_peak"]),
    "nccl_tests_a40_wrong.txt": ("faulty", ["#wrong"]),
    "nccl_tests_2node_network_error.txt": ("faulty", ["run stopped"]),
}
# real runs: none names its GPU, or it stops before nccl-tests' closing line, or both; (verdict, what a note says)
CORPUS = {
    # 8 ranks, no hosts: one node assumed, its peak held to the PCIe floor
    "gb200_oci_mnnvl_2tray_8gpu.txt": ("healthy", "the output names no GPU (nccl-tests prints one '#  Rank"),
    "h100_aws_p5_2node_efa.txt": ("unknown", "the output ends before"),
    # 16 ranks and no hosts: more than one node's worth, so no floor and no verdict
    "h100_oci_bm_gpu_h100_8_2node_roce.txt": ("unknown", "more than one node's worth"),
    "a100_1node_sendrecv_p2p.txt": ("unknown", "the model does not cover sendrecv"),
}


def _triage(text: str) -> tuple[str, str, list[str], list[str]]:
    report = triage_lines(io.StringIO(text), "test")
    return report.format, report.verdict, [f.code for f in report.findings], report.notes


def _verdict(text: str) -> str:
    return read("nccl-tests", iter(text.splitlines()), "test").verdict


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixtures(name: str) -> None:
    fmt, verdict, codes, _ = _triage((DATA / name).read_text())
    assert (fmt, verdict, codes) == ("nccl-tests", *EXPECTED[name])


def test_a_healthy_run_says_what_it_read_and_compared() -> None:
    _, _, _, notes = _triage((DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text())
    assert any("8 GPU(s) on 1 host(s)" in n and "A100-SXM4-80GB" in n for n in notes)
    # 2.30 model: 24 ring channels, one 512 KiB step of fill each; the run lands at 97% of it
    assert any(n.startswith("bus bandwidth from 256 MiB up is 97%") and "8 x a100-80gb" in n for n in notes)
    assert "assumed: NCCL 2.30 model (not in the output)" in notes


def test_corruption_is_faulty_with_its_rows_as_evidence() -> None:
    report = triage_lines(io.StringIO((DATA / "nccl_tests_a40_wrong.txt").read_text()), "a40")
    (finding,) = report.findings
    assert finding.severity == "critical" and finding.entity == "a40-worker-2"
    assert len(finding.evidence) == 3 and finding.evidence[-1] == "# Out of bounds values : 2 FAILED"
    assert all(line.startswith(("67108864", "268435456", "#")) for line in finding.evidence)


def test_a_stopped_run_names_the_cause_from_nccls_own_warning() -> None:
    report = triage_lines(io.StringIO((DATA / "nccl_tests_2node_network_error.txt").read_text()), "run")
    (finding,) = report.findings
    assert finding.entity == "gpu-a-017, gpu-a-018" and "network error" in finding.message
    assert "ib_transport_error" in finding.message and finding.fix
    # two nodes, NICs unknown: bandwidth not judged, and the note says what would give them
    assert any(n.startswith("bandwidth not judged") and "--nic-gbps" in n for n in report.notes)


def test_zero_byte_rows_are_read_and_said() -> None:
    _, verdict, _, notes = _triage((DATA / "nccl_tests_h100_allgather_slow.txt").read_text())
    assert verdict == "degraded" and "2 0-byte row(s) read and left out: nothing moves at that size" in notes


def test_unknown_gpu_is_unknown_for_bandwidth_but_still_reports_wrong() -> None:
    healthy = (DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text().replace("NVIDIA A100", "NVIDIA Z9")
    _, verdict, codes, notes = _triage(healthy)
    assert (verdict, codes) == ("healthy", [])  # held to its own peak and the PCIe floor, and said so
    assert any("GPU 'NVIDIA Z9-SXM4-80GB' is not in the catalog: judged against the run's own peak" in n
               for n in notes)  # fmt: skip
    assert "no corrupted results: #wrong is 0 on every row read" in notes
    wrong = (DATA / "nccl_tests_a40_wrong.txt").read_text().replace("NVIDIA A40", "NVIDIA Z9")
    assert _triage(wrong)[1:3] == ("faulty", ["#wrong"])


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_real_runs(name: str) -> None:
    path = PERF / name
    fmt, verdict, codes, notes = _triage(path.read_text())
    assert (fmt, verdict, codes) == ("nccl-tests", CORPUS[name][0], [])
    assert any(CORPUS[name][1] in n for n in notes), notes


def test_published_busbw_tables_are_not_tool_output() -> None:
    path = PERF / "a100_azure_ndv4_1node_8gpu.txt"
    assert _triage(path.read_text())[:2] == ("unknown", "unknown")  # a summary table, not nccl-tests' output
    report = read("nccl-tests", iter(path.read_text().splitlines()), "table")
    assert report.verdict == "unknown" and any("does not name its test" in n for n in report.notes)


def test_pasted_with_quoting_and_crlf_reads_the_same() -> None:
    for name in EXPECTED:
        text = (DATA / name).read_text()
        pasted = "$ ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8\r\n" + "".join(
            f"> {line}\r\n" for line in text.splitlines()
        )
        assert _triage(pasted)[1:3] == _triage(text)[1:3], name


def _cuts(text: str, rng: random.Random) -> list[str]:
    lines = text.splitlines(keepends=True)
    by_line = ["".join(lines[:k]) for k in range(len(lines))]
    by_char = [text[: rng.randrange(len(text))] for _ in range(40)]
    return by_line + by_char


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_cut_never_gets_a_different_confident_verdict(name: str) -> None:
    """Cut at every line and at random characters: the full verdict, or unknown; never healthy for a bad run."""
    text = (DATA / name).read_text()
    full = _verdict(text)
    for cut in _cuts(text, random.Random(name)):
        verdict = _verdict(cut)
        assert verdict in (full, "unknown"), (full, verdict, cut[-200:])


def test_only_bounded_text_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_reader, "MAX_TEXT", 4096)
    text = (DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text()
    report = read("nccl-tests", iter(text.splitlines()), "big")
    assert report.verdict == "unknown" and "only the first 0 MiB were read" in report.notes


def _fuzz_inputs() -> list[bytes]:
    files = [*FIXTURES, *(p for p in sorted(PERF.glob("*.txt")) if not p.name.endswith(".source.txt"))]
    return [p.read_bytes() for p in files]


def test_seeded_fuzz_never_raises_and_a_cut_never_turns_bad_into_healthy() -> None:
    rng = random.Random(12)
    inputs = _fuzz_inputs()
    for k in range(400):
        data = bytearray(rng.choice(inputs))
        kind = rng.randrange(4)
        if kind == 0:  # byte mutations
            for _ in range(rng.randint(1, 30)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:  # dropped lines
            lines = bytes(data).splitlines(keepends=True)
            data = bytearray(b"".join(line for line in lines if rng.random() > 0.2))
        elif kind == 2:  # absurd numbers and junk
            data += b"  " + b"9" * 400 + b"  4  float  sum  -1  1e400  nan  inf  0  N/A  N/A  N/A  N/A\n\x00\xff\xfe\n"
        full = triage_stream(io.BytesIO(bytes(data)), f"fuzz-{k}", "nccl-tests")
        assert full.verdict in ("healthy", "degraded", "faulty", "unknown")
        cut = triage_stream(io.BytesIO(bytes(data[: rng.randrange(len(data) + 1)])), f"cut-{k}", "nccl-tests")
        if full.verdict in ("faulty", "degraded"):
            assert cut.verdict != "healthy", k


def test_runs_one_after_another_are_judged_each() -> None:
    text = (DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text()
    text += (DATA / "nccl_tests_a40_wrong.txt").read_text()
    report = triage_lines(io.StringIO(text), "both")
    assert report.verdict == "faulty"
    (finding,) = report.findings
    assert finding.entity.startswith("run 2 (test not named)") and finding.code == "#wrong"
    assert any(n.startswith("run 1 (allreduce): bus bandwidth") for n in report.notes)


@pytest.mark.parametrize(
    "text, cls",
    [
        # quoted by a reporter without NCCL's prefix (misc/shmutils.cc)
        ("Error while creating shared memory segment /dev/shm/nccl-pZafXL (size 7340384)", "shm_too_small"),
        # XLA's wrapper around NCCL's result and its last WARN
        (
            "Failed to create NCCL communicator: INTERNAL: ncclCommInitRankConfig(...) failed:\n"
            "invalid usage ... Last NCCL warning(error): 'Bootstrap : no socket interface found'",
            "socket_ifname",
        ),
        # PyTorch's error with NCCL's result string
        ('NCCL error "receiving 524288 bytes instead of 65536"', "version_mismatch"),
    ],
)
def test_nccls_own_text_without_its_prefix_is_an_nccl_log(text: str, cls: str) -> None:
    report = triage_lines(io.StringIO(text), "pasted")
    assert report.format == "nccl-log"
    assert [f.code for f in report.findings] == [cls]


def test_prose_naming_an_nccl_call_is_not_an_nccl_log() -> None:
    report = triage_lines(io.StringIO("[Bug]: ncclAllReduce deadlocks on 2x RTX 5880 Ada (no NVLink)\n"), "thread")
    assert report.format == "unknown"


def test_rccl_tests_on_amd_instinct_are_read_and_held_to_their_own_peak() -> None:
    """rccl-tests prints nccl-tests' layout; the model does not cover AMD, so the run is held to its own peak and to
    the MI355X's own PCIe Gen5 link, with the catalog's Infinity Fabric links said."""
    fmt, verdict, codes, notes = _triage((PERF / "mi355x_oci_1node_8gpu_rccl.txt").read_text())
    assert (fmt, verdict, codes) == ("nccl-tests", "healthy", [])
    assert any("GPU mi355x (AMD Instinct MI355X)" in n for n in notes)
    assert any("judged against the run's own peak (407.26 GB/s" in n for n in notes)
    assert any("PCIe Gen5 x16" in n for n in notes) and any("7 scale-up links of 76.8 GB/s" in n for n in notes)


def test_an_engineering_sample_is_judged_from_its_own_run() -> None:
    """'NVIDIA Graphics Device' (a GPU without its marketing name): no model, so its own peak and GPU count."""
    text = (DATA / "nccl_tests_a100_allreduce_8gpu.txt").read_text().replace("NVIDIA A100-SXM4-80GB",
                                                                             "NVIDIA Graphics Device")  # fmt: skip
    _, verdict, codes, notes = _triage(text)
    assert (verdict, codes) == ("healthy", [])
    assert any("'NVIDIA Graphics Device' is not in the catalog: judged against the run's own peak" in n for n in notes)

    def slowed(line: str) -> str:  # bandwidths / 100 from 64 MiB up: the same GPUs through host memory
        t = line.split()
        if not line.strip()[:1].isdigit() or int(t[0]) < (64 << 20):
            return line
        return " ".join(f"{float(v) / 100:.2f}" if i in (6, 7, 10, 11) else v for i, v in enumerate(t))

    slow = "\n".join(slowed(ln) for ln in text.splitlines())
    assert _triage(slow)[1:3] == ("degraded", ["wrong_transport"])


RAS = Path(__file__).resolve().parents[2] / "captures" / "nccl_ras"


@pytest.mark.parametrize(
    "name, verdict, code, entity",
    [
        ("ras_2.26.2_healthy_256gpu_nccl1730.txt", "healthy", None, None),
        ("ras_2.26.2_allgather_mismatch_nccl1911.txt", "degraded", "ras mismatch", "30 rank(s) behind"),
        ("ras_2.27.3_incomplete_mismatch_nccl1762.txt", "degraded", "ras incomplete", "process 60004 on 10.4.109.13"),
        ("ras_guide_dead_process.txt", "faulty", "ras dead", "process 3487984 on 172.16.64.213 (GPU 5)"),
        ("ras_guide_monitor_peer_dead.txt", "faulty", "ras dead", "process 1524345 on 172.16.64.245 (GPU 1)"),
        ("ras_guide_json_missing_rank.json", "degraded", "ras incomplete", "rank 1 (GPU 1, process 1524345"),
    ],
)
def test_ras_reports_are_told_and_judged(name: str, verdict: str, code: str | None, entity: str | None) -> None:
    report = triage_lines(io.StringIO((RAS / name).read_text()), name)
    assert (report.format, report.verdict) == ("nccl-ras", verdict)
    if code is not None:
        assert any(f.code == code and (entity or "") in f.entity for f in report.findings), report.findings


def test_a_ras_report_cut_before_its_communicators_is_not_healthy() -> None:
    head = (RAS / "ras_2.26.2_healthy_256gpu_nccl1730.txt").read_text().split("Communicators")[0]
    report = read("nccl-ras", iter(head.splitlines()), "cut")
    assert report.verdict == "unknown" and any("no communicator table" in n for n in report.notes)
