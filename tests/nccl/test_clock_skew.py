"""`nccl diagnose` names clock skew when hosts stamp a moment all ranks share seconds apart: tested on a real
two-host log (nccl-tests over EFA, mpirun --tag-output) given NCCL's own timestamps as NCCL_DEBUG_TIMESTAMP_LEVELS=ALL
prints them, one host's clock shifted; and never on the real NCCL logs the tests hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpufleet.nccl.clock_skew import stamp_of
from gpufleet.nccl.diagnose import diagnose_texts

TESTS = Path(__file__).parents[1]
TWO_HOSTS = TESTS / "scored" / "round2" / "nccltests" / "06_g4dn_metal_2node_efa_mpirun_tag.txt"
TAG = re.compile(r"^(\[\d+,\d+\]<stdout>:)(test-nccl-efa-worker-(\d)):")
REAL_LOGS = sorted(
    [*(TESTS / "corpus" / "nccl" / "logs").glob("*.log"), *(TESTS / "scored").rglob("nccl/**/*.log"), TWO_HOSTS]
)


def _stamped(shift_s: dict[str, int], fmt: str = "[2023-03-01 10:00:{s:02d}] ", collector: bool = False) -> str:
    """The real log with NCCL's stamp (default format) between mpirun's tag and NCCL's host:pid:tid prefix; each
    worker's clock `shift_s` seconds off (a collector's stamp goes before the tag instead, when `collector`)."""
    out = []
    for k, line in enumerate(TWO_HOSTS.read_text().splitlines()):
        m = TAG.match(line)
        if m is None:
            out.append(line)
            continue
        base = 10 + k // 8  # the log spans a few seconds
        s = base + shift_s.get(m.group(2), 0)
        stamp = (
            f"[2023-03-01 {10 + s // 3600:02d}:{(s % 3600) // 60:02d}:{s % 60:02d}] " if s >= 60 else fmt.format(s=s)
        )
        if collector:
            out.append(f"2023-03-01T10:00:{s:02d}.000Z: {line}")
        else:
            out.append(f"{m.group(1)}{stamp}{line[len(m.group(1)) :]}")
    return "\n".join(out) + "\n"


def test_a_host_five_seconds_off_is_named_as_clock_skew() -> None:
    dx = diagnose_texts([("efa.log", _stamped({"test-nccl-efa-worker-1": 5}))])
    assert "clock_skew" in dx.also_seen
    assert "clock skew: hosts test-nccl-efa-worker-1 and test-nccl-efa-worker-0" in dx.summary
    assert "5.0 s apart" in dx.summary and "chronyc tracking" in dx.summary
    assert any("worker-1" in e and "Init COMPLETE" in e for e in dx.evidence)
    assert {"test-nccl-efa-worker-0", "test-nccl-efa-worker-1"} <= set(dx.hosts)


def test_hosts_a_second_apart_are_within_the_stamps_resolution() -> None:
    dx = diagnose_texts([("efa.log", _stamped({"test-nccl-efa-worker-1": 1}))])
    assert "clock_skew" not in dx.also_seen and "clock skew" not in dx.summary


def test_hosts_an_hour_apart_print_local_time_in_different_zones() -> None:
    dx = diagnose_texts([("efa.log", _stamped({"test-nccl-efa-worker-0": 3600}))])
    assert "time_zones_differ" in dx.also_seen and "clock_skew" not in dx.also_seen
    assert "different time zones" in dx.summary and "1.00 h apart" in dx.summary


def test_a_collectors_stamp_before_the_launchers_tag_is_not_the_nodes_clock() -> None:
    dx = diagnose_texts([("efa.log", _stamped({"test-nccl-efa-worker-1": 5}, collector=True))])
    assert "clock_skew" not in dx.also_seen


def test_per_rank_files_compare_too() -> None:
    text = _stamped({"test-nccl-efa-worker-1": 7})
    files = [(f"rank{r}.log", "\n".join(ln for ln in text.splitlines() if f"[1,{r}]" in ln)) for r in (0, 1)]
    dx = diagnose_texts(files)
    assert "clock_skew" in dx.also_seen and "7.0 s apart" in dx.summary


@pytest.mark.parametrize("log", REAL_LOGS, ids=lambda p: p.name)
def test_no_real_log_is_read_as_skewed(log: Path) -> None:
    dx = diagnose_texts([(log.name, log.read_text(errors="replace"))])
    assert not {"clock_skew", "time_zones_differ"} & set(dx.also_seen)


def test_nccls_stamp_formats() -> None:
    assert stamp_of("[2025-01-01 10:00:01] h:1:2 [0] NCCL INFO x") == stamp_of("[2025-01-01 10:00:00] h:1:2 [0] x") + 1  # type: ignore[operator]
    assert stamp_of("[2025-01-01 10:00:00.250000] h:1:2 [0] x") == 1735725600.25
    assert stamp_of("[2025-01-01 10:00:00] [1,0]<stdout>:h:1:2 [0] x") is None  # not NCCL's own
    assert stamp_of("h:1:2 [0] NCCL INFO x") is None
