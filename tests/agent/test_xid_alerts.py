"""A real `gpufleet agent` process following a kernel-log file, scraped by a real Prometheus that loads the shipped
alert rules (deploy/monitoring/gpufleet-rules.yml): a real Xid 79 report appended to the file makes GpuXidFatal
fire for the GPU it names, and for a GPU NVML does not list, by its PCI address. promtool then judges the series
the agent rendered for those lines against the same rules.

No GPU here: the agent's NVML is nvidia-ml-py with the driver replaced by data (tests/sources/gpu/fake_nvml.py), put
in its place by a sitecustomize module on the agent's PYTHONPATH. Its two GPUs are those of a recorded
dcgm-exporter page (tests/captures/dcgm_exporter_xid79.txt: gpu-node-07, H100s at 8D:00 and 91:00), the one at 91:00
with the UUID the Xid report's own log names for that address.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpufleet.telemetry.monitoring.alert_rules import dump
from gpufleet.telemetry.monitoring.rule_tests import render_annotation
from tests.apiclient import free_port
from tests.conftest import CORPUS, REPO_ROOT, require_tool

pytestmark = [pytest.mark.real, pytest.mark.slow]

NODE = "gpu-node-07"
SHIPPED_RULES = REPO_ROOT / "deploy" / "monitoring" / "gpufleet-rules.yml"
# the Xid 79 report: the GPU's UUID, its serial, the Xid line and the driver's fallen-off-the-bus lines (0000:91:00)
XID79_REPORT = (CORPUS / "burst_xid79_sxid_gpud.log").read_text().splitlines(keepends=True)[:5]
# an Xid 79 for 0000:2a:00, a GPU this node's NVML does not list (DCGM's own kmsg-reader test line)
XID79_UNLISTED = (CORPUS / "xid079_dcgm_kmsgtest.log").read_text().splitlines(keepends=True)[:1]
SITECUSTOMIZE = '''"""This process's NVML: the fake's, over two recorded GPUs (from tests/agent/test_xid_alerts.py)."""
import sys

from tests.sources.gpu.fake_nvml import FakeGpu, FakeNvml

sys.modules["pynvml"] = FakeNvml(  # type: ignore[assignment]
    [
        FakeGpu(uuid="GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b", name="NVIDIA H100 80GB HBM3", bus="00000000:8D:00.0",
                minor=0, temperature_c=34.0),
        FakeGpu(uuid="GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b", name="NVIDIA H100 80GB HBM3", bus="00000000:91:00.0",
                minor=1, temperature_c=36.0),
    ],
    driver="550.144.03",
)
'''
XID_SERIES = re.compile(r"^(DCGM_EXP_XID_ERRORS_COUNT|DCGM_FI_DEV_XID_ERRORS)\{(.*)\} (\S+)$")


@dataclass
class Node:
    kern_log: Path
    metrics_url: str
    prometheus: str
    agent: subprocess.Popen[bytes]
    stderr: Path

    def metrics(self) -> str:
        return httpx.get(self.metrics_url, timeout=5).text

    def xid_lines(self) -> list[str]:
        return [ln for ln in self.metrics().splitlines() if XID_SERIES.match(ln)]

    def alerts(self, name: str) -> list[dict[str, Any]]:
        data = httpx.get(f"{self.prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return [a for a in data if a["labels"]["alertname"] == name]

    def append(self, lines: list[str]) -> None:
        with self.kern_log.open("a") as fh:
            fh.writelines(lines)

    def wait(self, what: str, check: Callable[[], Any], within_s: float = 30.0) -> Any:
        deadline = time.monotonic() + within_s
        while True:
            if self.agent.poll() is not None:
                pytest.fail(f"the agent exited while waiting for {what}:\n{self.stderr.read_text()[-3000:]}")
            try:
                result = check()
            except (httpx.HTTPError, KeyError):
                result = None
            if result:
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}\nagent stderr:\n{self.stderr.read_text()[-3000:]}")
            time.sleep(0.25)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    require_tool("prometheus", "promtool", "curl")
    root = tmp_path_factory.mktemp("xid-node")
    site = root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    kern_log = root / "kern.log"
    kern_log.write_text("[    1.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115)\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFLEET_TOKEN", "GPUFLEET_SERVER")}
    env.update(PYTHONPATH=f"{site}{os.pathsep}{REPO_ROOT}", GPUFLEET_HOME=str(root / "home"), PYTHONUNBUFFERED="1")
    args = ["agent", "--node", NODE, "--kmsg-file", str(kern_log), "--port", str(port), "--interval", "1s"]
    args += ["--data-dir", str(root / "agent"), "--ib-sysfs", str(root / "no-ib"), "--no-attribution"]
    stderr = root / "agent.stderr"
    with stderr.open("wb") as err:
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpufleet.cli.main", *args], env=env, cwd=root, stdout=err, stderr=err
        )
    run_dir = root / "prom"
    prom_port = free_port()
    script = REPO_ROOT / "scripts" / "start-prometheus.sh"
    try:
        started = subprocess.run(
            [str(script), "--run-dir", str(run_dir), "--target", f"127.0.0.1:{port}", "--prometheus-port",
             str(prom_port), "--interval", "1s", "--rules", str(SHIPPED_RULES)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        yield Node(kern_log, f"http://127.0.0.1:{port}/metrics", f"http://127.0.0.1:{prom_port}", agent, stderr)
    finally:
        subprocess.run([str(script), "--stop", "--run-dir", str(run_dir)], timeout=30)
        agent.terminate()
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait(timeout=15)


def _own(labels: dict[str, str]) -> dict[str, str]:
    """An alert's labels but those Prometheus adds to what it scrapes."""
    return {k: v for k, v in labels.items() if k not in ("instance", "job")}


def _labels(body: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body))


def test_an_appended_xid_79_fires_gpu_xid_fatal_in_a_real_prometheus(node: Node, tmp_path: Path) -> None:
    # the agent read its log (each listed GPU's last Xid is 0) and Prometheus scrapes it: nothing fires yet
    node.wait("the log read", lambda: [ln for ln in node.xid_lines() if ln.startswith("DCGM_FI_DEV_XID_ERRORS")])
    assert node.xid_lines() == [
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b",pci_bus_id="00000000:8D:00.0",'
        f'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="{NODE}",DCGM_FI_DRIVER_VERSION="550.144.03"}} 0',
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b",pci_bus_id="00000000:91:00.0",'
        f'device="nvidia1",modelName="NVIDIA H100 80GB HBM3",hostname="{NODE}",DCGM_FI_DRIVER_VERSION="550.144.03"}} 0',
    ]
    query = f"{node.prometheus}/api/v1/query"
    scraped = 'DCGM_FI_DEV_XID_ERRORS{job="gpufleet-agent"}'
    node.wait("Prometheus's first scrape", lambda: httpx.get(query, params={"query": scraped}).json()["data"]["result"])
    assert node.alerts("GpuXidFatal") == []

    node.append(XID79_REPORT + XID79_UNLISTED)
    firing = node.wait(
        "GpuXidFatal firing for both GPUs",
        lambda: (a := [x for x in node.alerts("GpuXidFatal") if x["state"] == "firing"]) and len(a) == 2 and a,
    )
    by_bus = {a["labels"]["pci_bus_id"]: a for a in firing}
    listed, unlisted = by_bus["00000000:91:00.0"], by_bus["00000000:2A:00.0"]
    assert listed["labels"]["job"] == "gpufleet-agent"
    assert _own(listed["labels"]) == {
        "alertname": "GpuXidFatal", "severity": "critical", "xid": "79", "window_size_in_ms": "300000",
        "gpu": "1", "UUID": "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b", "pci_bus_id": "00000000:91:00.0",
        "device": "nvidia1", "modelName": "NVIDIA H100 80GB HBM3", "hostname": NODE,
        "DCGM_FI_DRIVER_VERSION": "550.144.03",
    }  # fmt: skip
    assert listed["annotations"]["summary"] == f"GPU 1 on {NODE} reported fatal Xid 79"
    assert _own(unlisted["labels"]) == {
        "alertname": "GpuXidFatal", "severity": "critical", "xid": "79", "window_size_in_ms": "300000",
        "pci_bus_id": "00000000:2A:00.0", "hostname": NODE,
    }  # fmt: skip
    assert node.alerts("GpuXid") == []  # 79 is fatal: the non-fatal rule stays quiet

    rendered = node.xid_lines()
    (tmp_path / "agent-xid-series.prom").write_text("\n".join(rendered) + "\n")  # kept with the test's files
    counts = [ln for ln in rendered if ln.startswith("DCGM_EXP_XID_ERRORS_COUNT")]
    assert len(counts) == 2 and all(ln.endswith(" 1") for ln in counts)
    assert any(ln.startswith('DCGM_FI_DEV_XID_ERRORS{gpu="1"') and ln.endswith("} 79") for ln in rendered)
    _promtool_fires_on(rendered, tmp_path)


def _promtool_fires_on(rendered: list[str], tmp_path: Path) -> None:
    """promtool over the series the agent rendered, as they were: quiet before the lines, firing after."""
    rules = yaml.safe_load(SHIPPED_RULES.read_text())
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "GpuXidFatal")
    series, expected = [], []
    for line in rendered:
        match = XID_SERIES.match(line)
        assert match is not None
        name, body, value = match.groups()
        labels = _labels(body)
        before = "0" if name == "DCGM_FI_DEV_XID_ERRORS" else "_"  # the count has no series before an Xid
        series.append({"series": f"{name}{{{body}}}", "values": f"{before}x2 {value}x3"})
        if name == "DCGM_EXP_XID_ERRORS_COUNT":
            alert_labels = {**labels, **rule["labels"]}
            expected.append(
                {
                    "exp_labels": alert_labels,
                    "exp_annotations": {
                        k: render_annotation(v, alert_labels, None) for k, v in rule["annotations"].items()
                    },
                }
            )
    (tmp_path / "gpufleet-rules.yml").write_text(SHIPPED_RULES.read_text())
    tests = {
        "rule_files": ["gpufleet-rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "the agent's series for an Xid 79 report",
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "1m", "alertname": "GpuXidFatal", "exp_alerts": []},
                    {"eval_time": "3m", "alertname": "GpuXidFatal", "exp_alerts": expected},
                    {"eval_time": "3m", "alertname": "GpuXid", "exp_alerts": []},
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(dump(tests))
    run = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
