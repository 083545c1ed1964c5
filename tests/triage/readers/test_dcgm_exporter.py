"""The dcgm-exporter reader: one scrape judged per GPU (Xids through the Xid policy, memory, clocks, temperatures,
DCGM health), counters only reported, and a partial scrape never called healthy."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from gpufleet.triage.formats import read
from gpufleet.triage.readers.dcgm_exporter import field_ids, read_dcgm_exporter_metrics
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES, CORPUS

DATA = CAPTURES
LABELS = 'gpu="{g}",UUID="GPU-{g}",pci_bus_id="00000000:{g}1:00.0",device="nvidia{g}",modelName="{model}"'


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def _scrape(values: dict[str, list[float | int | str]], model: str = "NVIDIA H100 80GB HBM3") -> list[str]:
    """A scrape in dcgm-exporter's layout: per family, HELP, TYPE, then one sample per GPU; fields in id order."""
    out = []
    for name in sorted(values, key=lambda n: field_ids().get(n, 10**6)):
        out += [f"# HELP {name} help", f"# TYPE {name} gauge"]
        out += [f"{name}{{{LABELS.format(g=g, model=model)}}} {v}" for g, v in enumerate(values[name])]
    return out


BASE: dict[str, list[float | int | str]] = {
    "DCGM_FI_DEV_GPU_TEMP": [40, 41],
    "DCGM_FI_DEV_XID_ERRORS": [0, 0],
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": [0, 0],
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": [0.1, 0.2],
}


@pytest.mark.parametrize(
    ("name", "verdict", "codes"),
    [
        ("dcgm_exporter_healthy.txt", "healthy", []),
        ("dcgm_exporter_xid79.txt", "faulty", ["Xid 79", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]),
        ("dcgm_exporter_thermal.txt", "degraded", ["hw_slowdown, hw_thermal", "GPU temperature over max operating"]),
        ("dcgm_exporter_row_remap.txt", "faulty", ["row remap failure", "remapped rows"]),
    ],
)
def test_fixtures(name: str, verdict: str, codes: list[str]) -> None:
    report = read_dcgm_exporter_metrics(_lines(name), name)
    assert report.verdict == verdict
    assert [f.code for f in report.findings] == codes


def test_xid_judged_by_the_policy_and_named_by_gpu() -> None:
    report = read_dcgm_exporter_metrics(_lines("dcgm_exporter_xid79.txt"), "x")
    xid, replays = report.findings
    assert xid.severity == "critical" and xid.entity == "gpu-node-07 GPU 1 (00000000:91:00.0)"
    assert "fallen off the bus" in xid.message and xid.fix.startswith("RESTART_BM")
    assert replays.severity == "info" and any("two scrapes" in note for note in report.notes)
    benign = read_dcgm_exporter_metrics(_scrape({**BASE, "DCGM_FI_DEV_XID_ERRORS": [0, 43]}), "x")
    assert [f.code for f in benign.findings] == ["Xid 43"] and benign.findings[0].severity == "info"  # IGNORE


def test_memory_temperature_and_health_watch_rules() -> None:
    values = {
        **BASE,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": [0, 2],
        "DCGM_FI_DEV_RETIRED_PENDING": [1, 0],
        "DCGM_FI_DEV_GPU_TEMP": [95, 41],  # H100 80GB HBM3 shuts down at 92 C
    }
    report = read_dcgm_exporter_metrics(_scrape(values), "x")
    found = {(f.entity.split(" (")[0], f.code, f.severity) for f in report.findings}
    assert ("GPU 1", "volatile uncorrectable ECC", "critical") in found
    assert ("GPU 0", "page retirement pending", "warning") in found
    assert ("GPU 0", "GPU temperature over shutdown", "critical") in found
    limits = {**BASE, "DCGM_FI_DEV_SLOWDOWN_TEMP": [70, 70], "DCGM_FI_DEV_GPU_TEMP": [72, 40]}
    own = read_dcgm_exporter_metrics(_scrape(limits), "x")  # the GPU's own limit wins over the catalog's
    assert [(f.code, f.severity) for f in own.findings] == [("GPU temperature over slowdown", "warning")]
    health = [
        *_scrape(BASE),
        'DCGM_EXP_GPU_HEALTH_STATUS{gpu="0",UUID="GPU-0",health_watch="MEM",health_error_code="DCGM_FR_OK"} 0',
        'DCGM_EXP_GPU_HEALTH_STATUS{gpu="1",UUID="GPU-1",health_watch="MEM",'
        'health_error_code="DCGM_FR_VOLATILE_DBE_DETECTED"} 20',
    ]
    assert read_dcgm_exporter_metrics(health, "x").verdict == "faulty"


def test_blank_values_new_names_and_old_names() -> None:
    blank = _scrape({**BASE, "DCGM_FI_DEV_MEMORY_TEMP": [9223372036854775794, 40]})
    report = read_dcgm_exporter_metrics(blank, "x")
    assert report.verdict == "healthy" and any("blank" in note for note in report.notes)
    renamed = {
        "DCGM_FI_DEV_XID_ERROR": [0, 119],
        "DCGM_FI_DEV_ROW_REMAP_FAILED": [0, 0],
        "DCGM_FI_PROF_SM_ACTIVE": [0, 0],
    }
    assert [f.code for f in read_dcgm_exporter_metrics(_scrape(renamed), "x").findings] == ["Xid 119"]
    old = ['dcgm_xid_errors{gpu="0",uuid="GPU-0"} 48', 'dcgm_gpu_temp{gpu="0",uuid="GPU-0"} 50']
    report = triage_lines(io.StringIO("\n".join(old) + "\n"), "old")
    assert report.format == "dcgm-exporter-metrics" and report.verdict == "faulty"


def test_a_partial_scrape_is_never_healthy() -> None:
    no_xid = {k: v for k, v in BASE.items() if k != "DCGM_FI_DEV_XID_ERRORS"}
    assert read_dcgm_exporter_metrics(_scrape(no_xid), "x").verdict == "unknown"
    early = {k: v for k, v in BASE.items() if k in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS")}
    stops = read_dcgm_exporter_metrics(_scrape(early), "x")
    assert stops.verdict == "unknown" and any("id order" in note for note in stops.notes)
    half = _scrape(BASE)[:-1]  # the last family has GPU 0 and not GPU 1
    assert read_dcgm_exporter_metrics(half, "x").verdict == "unknown"
    cut_line = _scrape(BASE)
    cut_line[-1] = cut_line[-1][:40]
    assert read_dcgm_exporter_metrics(cut_line, "x").verdict == "unknown"


@pytest.mark.parametrize(
    ("name", "verdict", "code"),
    [
        ("dcgm_exporter_metrics_01_a30_mig_de317.txt", "unknown", ""),
        ("dcgm_exporter_metrics_02_v100_de250.txt", "unknown", ""),
        ("dcgm_exporter_metrics_03_h100_podlabels_de490.txt", "unknown", ""),
        ("dcgm_exporter_metrics_04_mixed_mig_newlabels_pr736.txt", "unknown", ""),
        ("dcgm_exporter_metrics_05_xid_count_pr239.txt", "faulty", "Xid 42"),
        ("dcgm_exporter_metrics_06_readme_k8s.txt", "unknown", ""),
    ],
)
def test_corpus(name: str, verdict: str, code: str) -> None:
    """Excerpts of real scrapes: none but the fifth carries an Xid field, so none can be called healthy; the fifth
    counts Xid 42 once in its 5-minute window, which the Xid policy rates fatal."""
    path = CORPUS / name
    report = triage_lines(io.StringIO(path.read_text()), name)
    assert (report.format, report.verdict) == ("dcgm-exporter-metrics", verdict)
    assert not code or code in [f.code for f in report.findings]


def _files() -> list[Path]:
    real = sorted(p for p in CORPUS.glob("dcgm_exporter_metrics_*.txt") if ".source" not in p.name)
    return sorted(DATA.glob("dcgm_exporter_*.txt")) + real


def test_seeded_fuzz_cuts_mutations_and_dropped_lines() -> None:
    """Never an exception (only through `read`), and a cut never turns faulty or degraded into healthy."""
    rng = random.Random(9400)
    for path in _files():
        text = path.read_text(errors="replace")
        lines = text.splitlines()
        full = read("dcgm-exporter-metrics", lines, "full").verdict
        ends = [len("\n".join(lines[:i])) for i in range(len(lines) + 1)]
        for cut in ends + rng.sample(range(len(text) + 1), min(len(text) + 1, 40)):
            verdict = read("dcgm-exporter-metrics", text[:cut].splitlines(), "cut").verdict
            if full in ("faulty", "degraded"):
                assert verdict != "healthy", (path.name, cut)
            assert verdict in (full, "unknown"), (path.name, cut, verdict)
        for k in range(25):
            data = bytearray(text.encode())
            for _ in range(rng.randint(1, 12)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            kept = [line for line in lines if rng.random() > 0.15]
            for sample in (data.decode("utf-8", errors="replace").splitlines(), kept):
                assert read("dcgm-exporter-metrics", sample, f"fuzz-{k}").verdict in (
                    "healthy", "degraded", "faulty", "unknown")  # fmt: skip


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["1e400"],
        ['DCGM_FI_DEV_XID_ERRORS{gpu="0"} 1e400'],
        ['DCGM_FI_DEV_XID_ERRORS{gpu="0"} ' + "9" * 5000],
        ['DCGM_FI_DEV_XID_ERRORS{gpu="0"} -79'],
        ['DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0"} NaN', 'DCGM_FI_DEV_GPU_TEMP{gpu="0",modelName="x"} +Inf'],
        ['DCGM_EXP_XID_ERRORS_COUNT{gpu="0",xid="99999999999999999999",window_size_in_ms="0"} 3'],
        ['DCGM_FI_DEV_GPU_TEMP{gpu="' + "0" * 10000 + '"} 3'],
    ],
)
def test_odd_inputs(lines: list[str]) -> None:
    assert read_dcgm_exporter_metrics(lines, "odd").verdict in ("unknown", "healthy", "degraded", "faulty")
