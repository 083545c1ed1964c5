"""`nvidia-smi nvlink -s` judged once, on real captures: a PCIe card without NVLink bridges is not a fault unless
the node is known to be bridged; a bridged PCIe card is judged by the links its bridges carry; an SXM GPU with
every link inactive is down; a listing that cannot be judged is Unknown."""

from __future__ import annotations

from pathlib import Path

from gpufleet.catalog.gpus import model_for_product_name
from gpufleet.health.nvlink import PCIE_WITHOUT_BRIDGES, judge_nvlink, nvlink_design
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.topo import parse_nvlink_status, read_nvlink_status
from tests.conftest import CAPTURES

NO_BRIDGE = CAPTURES / "nvlink_status_a100_pcie_no_bridge_hpe.txt"
BRIDGED = CAPTURES / "nvlink_status_h100_pcie_bridged_hpe.txt"


def test_a_pcie_card_without_bridges_passes_with_a_note() -> None:
    judged = judge_nvlink(parse_nvlink_status(NO_BRIDGE.read_text()))
    assert judged.verdict == "Pass" and judged.issues == []
    assert judged.notes == [f"GPU {i} (NVIDIA A100-PCIE-40GB): {PCIE_WITHOUT_BRIDGES}" for i in (0, 1)]
    assert nvlink_design(model_for_product_name("NVIDIA A100-PCIE-40GB"), "NVIDIA A100-PCIE-40GB") == "optional"


def test_the_same_cards_on_a_node_built_with_bridges_are_down() -> None:
    judged = judge_nvlink(parse_nvlink_status(NO_BRIDGE.read_text()), bridged=True)
    assert judged.verdict == "Fail"
    assert [(i.entity, i.severity, i.code) for i in judged.issues] == [
        (f"GPU {i} (NVIDIA A100-PCIE-40GB)", Severity.critical, "NVLink down") for i in (0, 1)
    ]
    issue = judged.issues[0]
    assert "built with NVLink bridges" in issue.message and "bridges are present and seated" in issue.fix
    assert issue.evidence[0].startswith("GPU 0: NVIDIA A100-PCIE-40GB")


def test_bridged_pcie_cards_are_judged_by_the_links_their_bridges_carry() -> None:
    text = BRIDGED.read_text()
    judged = judge_nvlink(parse_nvlink_status(text))
    assert judged.verdict == "Pass" and judged.issues == []
    assert "GPU 0 (NVIDIA H100 PCIe): 12 of 18 NVLinks active, those its bridges carry" in judged.notes
    # one card with a bridge unseated: fewer links than the card beside it, and the fix is the bridges
    first, second = text.split("GPU 1:")
    unseated = first.replace("Link 0: 26.562 GB/s", "Link 0: <inactive>").replace(
        "Link 1: 26.562 GB/s", "Link 1: <inactive>"
    )
    judged = judge_nvlink(parse_nvlink_status(unseated + "GPU 1:" + second))
    assert judged.verdict == "Warn"
    [issue] = judged.issues
    assert (issue.entity, issue.code) == ("GPU 0 (NVIDIA H100 PCIe)", "NVLink inactive links")
    assert "bridges are present and seated" in issue.fix and "fabric manager" not in issue.fix


def test_an_sxm_gpu_with_every_link_inactive_is_down(corpus: Path) -> None:
    judged = judge_nvlink(parse_nvlink_status((corpus / "nvlink_status_all_inactive_aznhc.txt").read_text()))
    assert judged.verdict == "Fail" and [i.code for i in judged.issues] == ["NVLink down"]
    healthy = judge_nvlink(parse_nvlink_status((corpus / "nvlink_status_a100_ok_gpud.txt").read_text()))
    assert healthy.verdict == "Pass" and healthy.notes == ["8 GPU(s) with NVLink active, at 25 GB/s"]


def test_what_cannot_be_judged_is_unknown() -> None:
    cut = read_nvlink_status(BRIDGED.read_text()[:-12], strict=False)  # the last link line cut mid-state
    assert judge_nvlink(cut).verdict == "Unknown"
    unknown_model = judge_nvlink(parse_nvlink_status("GPU 0: Some GPU (UUID: GPU-1)\n\t Link 0: <inactive>\n"))
    assert unknown_model.verdict == "Unknown" and not unknown_model.judged
