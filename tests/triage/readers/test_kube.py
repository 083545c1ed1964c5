"""kubectl's views of a node through triage: `get node -o json` and `describe node`, judged for GPU work."""

from __future__ import annotations

import copy
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gpufleet.triage.formats import read
from gpufleet.triage.run import triage_lines, triage_stream

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = sorted(p for p in DATA.glob("kubectl_*") if not p.name.endswith(".source.txt"))  # outputs, not notes

# fixture -> (format, verdict, codes)
EXPECTED = {
    "kubectl_node_gpu_healthy.json": ("kubectl-node-json", "healthy", []),
    "kubectl_node_gpu_xid_unhealthy.json": (
        "kubectl-node-json",
        "faulty",
        ["SysLogsXIDError=True", "cordoned", "allocatable < capacity"],
    ),
    "kubectl_nodes_list.json": (
        "kubectl-node-json",
        "faulty",
        ["Ready=Unknown", "no GPUs advertised", "MemoryPressure=True"],
    ),
    "kubectl_describe_node_gpu_healthy.txt": ("kubectl-describe-node", "healthy", []),
    "kubectl_describe_nodes_two.txt": (
        "kubectl-describe-node",
        "faulty",
        ["AcceleratedHardwareReady=False", "cordoned", "allocatable < capacity"],
    ),
}


def _triage(text: str) -> tuple[str, str, list[str], list[str]]:
    report = triage_lines(io.StringIO(text), "test")
    return report.format, report.verdict, [f.code for f in report.findings], report.notes


def _node() -> dict[str, Any]:
    node: dict[str, Any] = json.loads((DATA / "kubectl_node_gpu_healthy.json").read_text())
    return node


def _judge(node: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    report = read("kubectl-node-json", iter(json.dumps(node, indent=4).splitlines()), "node")
    return report.verdict, [f.code for f in report.findings], report.notes


def _with_condition(node: dict[str, Any], kind: str, status: str, reason: str = "", message: str = "") -> None:
    node["status"]["conditions"].insert(0, {"type": kind, "status": status, "reason": reason, "message": message})


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixtures(name: str) -> None:
    fmt, verdict, codes, _ = _triage((DATA / name).read_text())
    assert (fmt, verdict, codes) == EXPECTED[name]


def test_evidence_and_entities() -> None:
    report = triage_lines(io.StringIO((DATA / "kubectl_describe_nodes_two.txt").read_text()), "two")
    by_code = {f.code: f for f in report.findings}
    assert {f.entity for f in report.findings} == {"ip-10-1-37-40.us-east-2.compute.internal"}
    assert by_code["allocatable < capacity"].evidence == ["Capacity: nvidia.com/gpu:         8",
                                                          "Allocatable: nvidia.com/gpu:         6"]  # fmt: skip
    assert by_code["AcceleratedHardwareReady=False"].evidence[0].split()[:2] == ["AcceleratedHardwareReady", "False"]
    cordon = by_code["cordoned"].evidence
    assert cordon[0].startswith("Unschedulable:") and "node.kubernetes.io/unschedulable:NoSchedule" in cordon[1]


@pytest.mark.parametrize(
    ("kind", "status", "verdict", "code"),
    [
        ("Ready", "False", "faulty", "Ready=False"),
        ("NetworkUnavailable", "True", "degraded", "NetworkUnavailable=True"),
        ("KernelDeadlock", "True", "degraded", "KernelDeadlock=True"),  # node-problem-detector
        ("GpuMemWatch", "True", "faulty", "GpuMemWatch=True"),  # NVSentinel
        ("SysLogsGPUFallenOff", "True", "faulty", "SysLogsGPUFallenOff=True"),
        ("NVSwitchFatalError", "True", "faulty", "NVSwitchFatalError=True"),
        ("NVSwitchNonFatalError", "True", "degraded", "NVSwitchNonFatalError=True"),
        ("AcceleratedHardwareReady", "False", "faulty", "AcceleratedHardwareReady=False"),  # EKS: True is good
        ("AcceleratedHardwareReady", "True", "healthy", ""),
        ("GPUMissing", "True", "faulty", "GPUMissing=True"),  # AKS
        ("GpuMemWatch", "Unknown", "healthy", ""),
    ],
)
def test_conditions(kind: str, status: str, verdict: str, code: str) -> None:
    node = _node()
    if kind == "Ready":
        node["status"]["conditions"] = [c for c in node["status"]["conditions"] if c["type"] != "Ready"]
    _with_condition(node, kind, status, "Reason", "what the agent saw")
    got_verdict, codes, notes = _judge(node)
    assert (got_verdict, codes) == (verdict, [code] if code else [])
    if status == "Unknown":
        assert any("GpuMemWatch Unknown" in n for n in notes)


def test_a_lost_node_says_so_once() -> None:
    node = _node()
    for c in node["status"]["conditions"]:
        c.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")
    node["spec"]["taints"].append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})
    report = read("kubectl-node-json", iter(json.dumps(node).splitlines()), "lost")
    (finding,) = report.findings
    assert finding.code == "Ready=Unknown" and "node.kubernetes.io/unreachable" in finding.evidence[-1]
    node["status"]["conditions"] = []
    assert _judge(node)[:2] == ("faulty", ["node.kubernetes.io/unreachable"])


XID_TAINT = {"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}  # NVSentinel's examples
NVLINK_TAINT = {"key": "nvidia.com/gpu-nvlink-error", "value": "true", "effect": "PreferNoSchedule"}
OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("taint", "verdict", "code"),
    [
        (XID_TAINT, "faulty", "nvidia.com/gpu-xid-error"),
        (NVLINK_TAINT, "degraded", "nvidia.com/gpu-nvlink-error"),
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}, "degraded", "nvidia.com/gpu"),
        ({"key": "nvidia.com/gpu", "value": "unhealthy", "effect": "NoSchedule"}, "faulty", "nvidia.com/gpu"),
        (OUT_OF_SERVICE, "faulty", "node.kubernetes.io/out-of-service"),
        ({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}, "degraded", "cordoned"),
        ({"key": "dedicated", "value": "training", "effect": "NoSchedule"}, "healthy", ""),
    ],
)
def test_taints(taint: dict[str, str], verdict: str, code: str) -> None:
    node = _node()
    node["spec"]["taints"].append(taint)
    assert _judge(node)[:2] == (verdict, [code] if code else [])


def test_gpu_dedication_taint_is_normal_and_cordon_is_a_warning() -> None:
    node = _node()
    verdict, _, notes = _judge(node)
    assert verdict == "healthy" and any("GPU-dedication taint nvidia.com/gpu=present:NoSchedule" in n for n in notes)
    node["spec"]["unschedulable"] = True
    assert _judge(node)[:2] == ("degraded", ["cordoned"])


def _resources(node: dict[str, Any], resource: str, capacity: int, allocatable: int) -> None:
    for part in ("capacity", "allocatable"):
        node["status"][part].pop("nvidia.com/gpu", None)
    node["status"]["capacity"][resource] = str(capacity)
    node["status"]["allocatable"][resource] = str(allocatable)


def test_device_plugin_resources() -> None:
    node = _node()
    _resources(node, "nvidia.com/gpu", 8, 7)
    assert _judge(node)[:2] == ("faulty", ["allocatable < capacity"])
    _resources(node, "nvidia.com/gpu", 7, 7)  # one GPU missing where GPU feature discovery counted 8
    assert _judge(node)[:2] == ("degraded", ["fewer GPUs than labelled"])
    _resources(node, "nvidia.com/gpu", 0, 0)  # the plugin has not registered (after a kubelet restart: 0)
    assert _judge(node)[:2] == ("faulty", ["no GPUs advertised"])
    for part in ("capacity", "allocatable"):
        node["status"][part].pop("nvidia.com/gpu")
    verdict, codes, _ = _judge(node)
    assert (verdict, codes) == ("faulty", ["no GPUs advertised"])


def test_sharing_and_mig_counts() -> None:
    shared = _node()
    shared["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "4"  # time-slicing: 4 references per GPU
    _resources(shared, "nvidia.com/gpu", 32, 32)
    assert _judge(shared)[:2] == ("healthy", [])
    _resources(shared, "nvidia.com/gpu", 28, 28)
    assert _judge(shared)[:2] == ("degraded", ["fewer GPUs than labelled"])
    renamed = _node()
    renamed["metadata"]["labels"]["nvidia.com/gpu.shared.replicas"] = "10"
    _resources(renamed, "nvidia.com/gpu.shared", 80, 70)
    assert _judge(renamed)[:2] == ("faulty", ["allocatable < capacity"])
    mixed = _node()
    mixed["metadata"]["labels"].update({"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.count": "14"})
    _resources(mixed, "nvidia.com/mig-1g.10gb", 14, 14)
    assert _judge(mixed)[:2] == ("healthy", [])
    _resources(mixed, "nvidia.com/mig-1g.10gb", 12, 11)
    assert _judge(mixed)[:2] == ("faulty", ["allocatable < capacity", "fewer GPUs than labelled"])


def test_a_node_without_gpus_is_judged_as_a_node() -> None:
    node = _node()
    node["metadata"]["labels"] = {"kubernetes.io/hostname": "cpu-1"}
    node["spec"]["taints"] = []
    for part in ("capacity", "allocatable"):
        node["status"][part].pop("nvidia.com/gpu")
    verdict, codes, notes = _judge(node)
    assert (verdict, codes) == ("healthy", []) and not any("GPU node" in n for n in notes)


def test_lists_and_what_is_not_a_node() -> None:
    items = {"apiVersion": "v1", "kind": "List", "items": [_node(), {"kind": "Pod", "metadata": {"name": "p"}}]}
    report = read("kubectl-node-json", iter(json.dumps(items).splitlines()), "list")
    assert report.verdict == "healthy" and "1 item(s) of another kind left out" in report.notes
    pod = read("kubectl-node-json", iter(['{"kind": "Pod", "metadata": {}}']), "pod")
    assert pod.verdict == "unknown" and "not a Node" in pod.notes[0]
    bare = read("kubectl-node-json", iter(['{"kind": "Node", "metadata": {"name": "n"}}']), "bare")
    assert bare.verdict == "unknown" and any("nothing to judge" in n for n in bare.notes)


def test_html_escaped_and_quoted_describe() -> None:
    text = (DATA / "kubectl_describe_nodes_two.txt").read_text().replace("<none>", "&lt;none&gt;")
    pasted = "$ kubectl describe nodes\n" + "".join(f"> {line}\n" for line in text.splitlines())
    assert _triage(pasted)[:3] == EXPECTED["kubectl_describe_nodes_two.txt"]


def test_describe_cut_before_system_info_is_not_whole() -> None:
    text = (DATA / "kubectl_describe_node_gpu_healthy.txt").read_text()
    cut = text[: text.index("  nvidia.com/gpu:")]  # inside Capacity, before the GPUs
    _, verdict, codes, notes = _triage(cut)
    assert (verdict, codes) == ("unknown", [])  # not "no GPUs advertised": the rest is only cut off
    assert any("ends before 'System Info:'" in n for n in notes)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x00\xff\xfe garbage",
        '{"a":' * 100_000,
        '{"kind": "Node", "x": ' + "1" * 5000 + "}",
        '{"kind": "Node", "status": {"capacity": {"nvidia.com/gpu": 1e400}, "conditions": [1, null, "x"]}}',
        '{"kind": "Node", "metadata": [], "spec": "x", "status": {"conditions": {"type": "Ready"}}}',
        '{"kind": "List", "items": [[], 1, {"kind": "Node", "spec": {"taints": [null, 3, {"key": 5}]}}]}',
        "Name: x\nConditions:\n  Ready  False\nCapacity:\n  nvidia.com/gpu: 99999999999999999999999\n",
    ],
)
def test_bad_input_is_unknown_or_judged_never_an_exception(text: str) -> None:
    for fmt in ("kubectl-node-json", "kubectl-describe-node"):
        report = read(fmt, iter(text.splitlines()), "bad")
        assert report.verdict in ("healthy", "degraded", "faulty", "unknown")
    deep = read("kubectl-node-json", iter(['{"a":' * 100_000]), "deep")
    assert deep.verdict == "unknown" and "nests deeper than 64 levels" in deep.notes[0]


def _cuts(text: str, rng: random.Random) -> list[str]:
    lines = text.splitlines(keepends=True)
    return ["".join(lines[:k]) for k in range(len(lines))] + [text[: rng.randrange(len(text))] for _ in range(60)]


def _between_nodes(cut: str, full: str) -> bool:
    """A describe text cut after a whole node and before the next: it reads as a shorter `describe nodes`, and
    nothing in it can tell (kubectl prints no closing line)."""
    nodes_in_cut = sum(line.startswith("Name:") for line in cut.splitlines())
    nodes_in_full = sum(line.startswith("Name:") for line in full.splitlines())
    return nodes_in_cut < nodes_in_full and read("kubectl-describe-node", iter(cut.splitlines()), "c").complete


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_cut_never_gets_a_different_confident_verdict(name: str) -> None:
    text = (DATA / name).read_text()
    fmt, full, _, _ = _triage(text)
    for cut in _cuts(text, random.Random(name)):
        if fmt == "kubectl-describe-node" and _between_nodes(cut, text):
            continue
        verdict = read(fmt, iter(cut.splitlines()), "cut").verdict
        assert verdict in (full, "unknown"), (full, verdict, cut[-300:])


def test_a_describe_cut_between_nodes_judges_the_nodes_it_has() -> None:
    """The one cut a text format cannot show: after the healthy first node, before the faulty second one."""
    text = (DATA / "kubectl_describe_nodes_two.txt").read_text()
    first = text[: text.index("Name:", 10)]
    report = read("kubectl-describe-node", iter(first.splitlines()), "first")
    assert report.verdict == "healthy" and report.complete
    second = text[: text.index("Name:", 10) + 60]  # into the second node: not whole
    assert read("kubectl-describe-node", iter(second.splitlines()), "second").verdict == "unknown"


def test_a_list_cut_short_is_judged_up_to_the_cut() -> None:
    text = (DATA / "kubectl_nodes_list.json").read_text()
    cut = text[: text.index('"name": "cpu-node-01"')]
    report = read("kubectl-node-json", iter(cut.splitlines()), "cut")
    assert report.verdict == "faulty" and [f.code for f in report.findings] == ["Ready=Unknown", "no GPUs advertised"]
    assert "the JSON ends before its last closing bracket: input ends mid-record" in report.notes


def test_seeded_fuzz_never_raises_and_a_cut_never_turns_bad_into_healthy() -> None:
    rng = random.Random(7)
    inputs = [p.read_bytes() for p in FIXTURES]
    for k in range(300):
        data = bytearray(rng.choice(inputs))
        kind = rng.randrange(3)
        if kind == 0:
            for _ in range(rng.randint(1, 30)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:
            lines = bytes(data).splitlines(keepends=True)
            data = bytearray(b"".join(line for line in lines if rng.random() > 0.2))
        for fmt in ("kubectl-node-json", "kubectl-describe-node"):
            full = triage_stream(io.BytesIO(bytes(data)), f"fuzz-{k}", fmt)
            assert full.verdict in ("healthy", "degraded", "faulty", "unknown")
            cut_data = bytes(data[: rng.randrange(len(data) + 1)])
            cut = triage_stream(io.BytesIO(cut_data), f"cut-{k}", fmt)
            text, cut_text = bytes(data).decode(errors="replace"), cut_data.decode(errors="replace")
            if fmt == "kubectl-describe-node" and _between_nodes(cut_text, text):
                continue
            if full.verdict in ("faulty", "degraded"):
                assert cut.verdict != "healthy", (k, fmt)


def test_json_the_kubernetes_client_writes() -> None:
    """A Node as the API serves it, built with the kubernetes client's own models."""
    kubernetes = pytest.importorskip("kubernetes")
    c = kubernetes.client
    node = c.V1Node(
        api_version="v1",
        kind="Node",
        metadata=c.V1ObjectMeta(name="a100-3", labels={"nvidia.com/gpu.present": "true"}),
        spec=c.V1NodeSpec(taints=[c.V1Taint(key="nvidia.com/gpu-xid-error", value="true", effect="NoSchedule")]),
        status=c.V1NodeStatus(
            capacity={"nvidia.com/gpu": "4"},
            allocatable={"nvidia.com/gpu": "4"},
            conditions=[c.V1NodeCondition(type="Ready", status="True", reason="KubeletReady")],
        ),
    )
    wire = json.dumps(c.ApiClient().sanitize_for_serialization(node), indent=4)
    fmt, verdict, codes, _ = _triage(wire)
    assert (fmt, verdict, codes) == ("kubectl-node-json", "faulty", ["nvidia.com/gpu-xid-error"])


def test_only_bounded_text_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.triage.readers import common

    monkeypatch.setattr(common, "MAX_TEXT", 2048)
    text = (DATA / "kubectl_describe_node_gpu_healthy.txt").read_text()
    report = read("kubectl-describe-node", iter(text.splitlines()), "big")
    assert report.verdict == "unknown" and any("only the first" in n for n in report.notes)
    node = copy.deepcopy(_node())
    big = read("kubectl-node-json", iter(json.dumps(node, indent=4).splitlines()), "big")
    assert big.verdict == "unknown"
