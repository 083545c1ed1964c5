"""`gpufleet fabric settings` and `fabric discover --settings` as a person runs them: saved captures of a host
(ibv_devinfo, mlnx_qos, OpenSM's files) judged together with other hosts' settings, JSON the doctor and discover
read back, and one clear line for input it cannot use."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clirun import gpufleet
from tests.conftest import CAPTURES

IB = CAPTURES / "infiniband"
NETDISCOVER = CAPTURES / "ibsim" / "ibnetdiscover.txt"


def test_captures_judged_across_hosts_and_read_back(tmp_path: Path) -> None:
    gpu = gpufleet(
        "fabric", "settings", "--host", "gpu-01",
        "--ibv-devinfo", str(IB / "ibv_devinfo_mlx4_port2_down.txt"),
        "--mlnx-qos", f"eth2={IB / 'mlnx_qos_spiderpool_prio5.txt'}",
        "-o", "json",
    )  # fmt: skip
    assert gpu.returncode == 0, gpu.stderr
    body = json.loads(gpu.stdout)
    [host] = body["fabricSettings"]
    assert host["host"] == "gpu-01" and len(host["ports"]) == 4
    assert host["roce"][0]["pfc"] == [5] and host["roce"][0]["trust"] == "dscp"
    saved = tmp_path / "gpu-01.json"
    saved.write_text(gpu.stdout)
    conf = tmp_path / "opensm.conf"
    conf.write_text("routing_engine minhop\nsweep_interval 0\n")
    sm = gpufleet("fabric", "settings", "--host", "sm-01", "--opensm-conf", str(conf), "--with", str(saved),
                  "-o", "json")  # fmt: skip
    assert sm.returncode == 0, sm.stderr
    kinds = sorted(f["kind"] for f in json.loads(sm.stdout)["findings"])
    assert kinds == ["opensm-sweep-disabled"]  # not known to be a fat tree: the routing engine is not judged
    # discover knows the tree from the fabric itself
    found = gpufleet("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "--settings", str(tmp_path / "sm.json"))
    assert found.returncode == 2 and "sm.json: no such file" in found.stderr
    (tmp_path / "sm.json").write_text(sm.stdout)
    found = gpufleet("fabric", "discover", "--ibnetdiscover", str(NETDISCOVER), "--settings",
                     str(tmp_path / "sm.json"), "-o", "json")  # fmt: skip
    assert found.returncode == 0, found.stderr
    discovered = json.loads(found.stdout)
    assert [h["host"] for h in discovered["fabricSettings"]] == ["sm-01", "gpu-01"]
    kinds = {f["kind"] for f in discovered["findings"]}
    assert {"opensm-routing-engine", "opensm-sweep-disabled"} <= kinds
    table = gpufleet("fabric", "settings", "--host", "sm-01", "--opensm-conf", str(conf), "--fat-tree")
    assert table.returncode == 0 and "opensm-routing-engine" in table.stdout and "minhop" in table.stdout


def test_input_it_cannot_use(tmp_path: Path) -> None:
    bad = gpufleet("fabric", "settings", "--mlnx-qos", "eth2")
    assert bad.returncode == 2 and "NETDEV=FILE" in bad.stderr and "Traceback" not in bad.stderr
    empty = tmp_path / "x.txt"
    empty.write_text("nothing here\n")
    bad = gpufleet("fabric", "settings", "--mlnx-qos", f"eth2={empty}")
    assert bad.returncode == 2 and "no trust state or PFC" in bad.stderr
    bad = gpufleet("fabric", "settings", "--with", str(empty))
    assert bad.returncode == 2 and "no fabricSettings" in bad.stderr
    bad = gpufleet("fabric", "settings", "--partitions-conf", str(empty))
    assert bad.returncode == 2 and "--opensm-conf" in bad.stderr


def test_soft_roce_behind_a_dropping_firewall_read_from_another_host(tmp_path: Path) -> None:
    import msgspec

    from gpufleet.model.fabric_settings import HcaPortSetting, HostFabricSettings, RoceFirewall
    from gpufleet.parsers.firewall import udp_port_iptables

    verdict = udp_port_iptables((CAPTURES / "firewall" / "iptables_save_algo_input_drop.txt").read_text())
    assert verdict is not None
    soft = HostFabricSettings(
        "gpu-07",
        ports=[HcaPortSetting("rxe0", 1, "Ethernet", "Active", 1024, 4096, "eth1", 1500, "up", True, ["RoCE v2"])],
        roce_firewall=RoceFirewall(verdict.tool, verdict.verdict, verdict.rule, verdict.chain),
    )
    saved = tmp_path / "gpu-07.json"
    saved.write_text(msgspec.json.encode({"fabricSettings": [soft]}).decode())
    hard = IB / "ibv_devinfo_mlx4_port2_down.txt"
    done = gpufleet("fabric", "settings", "--host", "gpu-01", "--ibv-devinfo", str(hard), "--with", str(saved))
    assert done.returncode == 0, done.stderr
    assert "gpu-07: UDP 4791 (RoCEv2): rxe0: soft-RoCE; the firewall (iptables-save) drops UDP 4791" in done.stdout
    assert "soft-roce-firewall" in done.stdout or "soft-RoCE (rdma_rxe)" in done.stdout
    body = json.loads(gpufleet("fabric", "settings", "--host", "gpu-01", "--ibv-devinfo", str(hard), "--with",
                               str(saved), "-o", "json").stdout)  # fmt: skip
    [critical] = [f for f in body["findings"] if f["kind"] == "soft-roce-firewall"]
    assert critical["severity"] == "critical" and "udp dport 4791 accept" in critical["fix"]
