"""The message catalog (data/messages.yaml) and the status table (data/ibv_wc_status.yaml)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpufleet.nccl._files import load_yaml
from gpufleet.nccl.diagnose import CANDIDATE, CLASSES, catalog, classify_line, signatures

REPO = Path(__file__).resolve().parents[2]
ENTRIES: list[dict[str, Any]] = load_yaml("messages.yaml")["messages"]


def _as_logged(entry: dict[str, Any]) -> str:
    """The example as NCCL prints it: host:pid:tid [dev] file:line NCCL LEVEL text; PyTorch's lines as they are."""
    if entry["level"] == "TEXT":
        return str(entry["example"])
    return f"gpu-node-07:31337:31402 [3] transport/x.cc:100 NCCL {entry['level']} {entry['example']}"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e['id']}-{e['class']}")
def test_every_example_classifies_to_its_class(entry: dict[str, Any]) -> None:
    line = _as_logged(entry)
    assert CANDIDATE.search(line), "the cheap prefilter would skip this message"
    assert classify_line(line) == entry["class"]


def test_catalog_provenance_and_shape() -> None:
    raw = load_yaml("messages.yaml")
    assert raw["nccl"]["repository"] == "NVIDIA/nccl"
    assert raw["nccl"]["tags"][0] == "v2.12.12-1" and len(raw["nccl"]["tags"]) >= 4
    assert any(f.startswith("src/transport/net_ib") for f in raw["nccl"]["files"])
    known = set(CLASSES) | {"benign"}
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)) and len(ENTRIES) > 500
    for e in ENTRIES:
        assert e["class"] in known, e
        assert e["source"].startswith(("NVIDIA/nccl src/", "pytorch/pytorch torch/")), e
        assert e["versions"], e
        if e["level"] != "TEXT":
            assert set(e["versions"]) <= set(raw["nccl"]["tags"]), e
    assert sum(e["class"] == "collective_timeout" and e["level"] == "TEXT" for e in ENTRIES) >= 8


def test_every_anchor_is_in_its_example() -> None:
    by_id = {e["id"]: e for e in ENTRIES}
    for entry in catalog():
        assert entry.anchor and entry.anchor in by_id[entry.id]["example"], entry


def test_new_classes_have_summary_fix_and_priority() -> None:
    for sig in signatures():
        assert sig.summary and sig.fix and 0 < sig.priority < 100
    prio = {s.name: s.priority for s in signatures()}
    # Root causes outrank the symptoms they produce on other ranks.
    assert prio["cuda_oom"] < prio["cuda_error"] < prio["ib_transport_error"] < prio["peer_connection_lost"]
    assert prio["peer_connection_lost"] < prio["collective_timeout"] < prio["comm_aborted"]


def test_wc_status_table_is_complete() -> None:
    table = load_yaml("ibv_wc_status.yaml")
    status = table["wc_status"]
    assert sorted(status) == list(range(24))  # IBV_WC_SUCCESS .. IBV_WC_TM_RNDV_INCOMPLETE
    assert status[5]["name"] == "WR_FLUSH_ERR" and status[5]["cascade"]
    assert status[12]["name"] == "RETRY_EXC_ERR" and status[13]["name"] == "RNR_RETRY_EXC_ERR"
    assert status[4]["name"] == "LOC_PROT_ERR" and status[10]["name"] == "REM_ACCESS_ERR"
    errno = table["errno"]
    assert errno[110]["name"] == "ETIMEDOUT" and errno[111]["name"] == "ECONNREFUSED"
    assert errno[104]["text"] == "Connection reset by peer"


# The extraction script: printf formats and C macros become the expected expressions.
@pytest.fixture(scope="module")
def extractor() -> ModuleType:
    path = REPO / "scripts" / "nccl_messages.py"
    spec = importlib.util.spec_from_file_location("nccl_messages", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["nccl_messages"] = module
    spec.loader.exec_module(module)
    return module


def test_extractor_reads_literal_formats_and_macro_pieces(extractor: ModuleType) -> None:
    src = r"""
    #define CHECK(name) do { \
        WARN("Call to " name " failed with error %s", strerror(errno)); /* why */ \
      } while (0)
    // WARN("commented out %d", 1);
    static void f() {
      WARN("NET/IB : Got completion from peer %s with status=%d len=%" PRIu64 " (%s)", a, b, c, d);
      INFO(NCCL_NET, "Connected to %s", x);
      WARN("%s", buf);
    }
    """
    found = list(extractor.calls(src))
    fmts = [f for _, f in found]
    assert ("WARN", "Call to \x00 failed with error %s") in found
    assert "NET/IB : Got completion from peer %s with status=%d len=%llu (%s)" in fmts
    assert ("INFO", "Connected to %s") in found and "%s" in fmts and len(found) == 4
    regex, example = extractor.to_regex("NET/IB : Got completion from peer %s with status=%d len=%llu (%s)")
    assert regex == r"NET/IB : Got completion from peer (.*?) with status=(-?\d+) len=(-?\d+) \((.*?)\)"
    assert re.fullmatch(regex, example) and "status=12" in example
    regex, _ = extractor.to_regex("Call to \x00 failed with error %s")
    assert re.fullmatch(regex, "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory")
