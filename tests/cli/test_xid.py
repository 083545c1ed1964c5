"""`gpufleet xid classify|explain|policy` through the real command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpufleet.health.xid_policy import code_verdicts
from tests.clirun import gpufleet


def test_classify_json_records(corpus: Path) -> None:
    files = [str(corpus / "xid154_gpud_gb200.log"), str(corpus / "burst_xid79_sxid_gpud.log")]
    result = gpufleet("xid", "classify", "-o", "json", *files)
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert len(records) == 11
    first = records[0]
    for key in (
        "file",
        "line",
        "xid",
        "kind",
        "pci",
        "severity",
        "action",
        "root_xid",
        "time",
        "host",
        "message",
    ):
        assert key in first
    assert (first["xid"], first["severity"], first["action"], first["time"]) == (
        154,
        "FATAL",  # it announces GPU Reset Required
        "RESET_GPU",
        171167.897562,
    )
    fallen = records[2]
    assert (fallen["kind"], fallen["root_xid"], fallen["action"]) == ("fallen_off_bus", 79, "RESTART_BM")
    assert {r["kind"] for r in records[3:]} == {"sxid"}
    assert first["detail"]["recovery_action"] == {
        "from": "0x4 (Drain and Reset)",
        "to": "0x1 (GPU Reset Required)",
    }
    assert fallen["detail"]["gpu_uuid"] == "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"
    assert records[6]["detail"]["nvswitch"] == {"switch": "nvidia-nvswitch0", "link": 63, "continues_line": 7}


def test_classify_table_warns_about_rejected_lines(corpus: Path) -> None:
    result = gpufleet(
        "xid", "classify", str(corpus / "neg_xid043_kmsg_malformed.log"), str(corpus / "xid069_nvsentinel_csvtest.log")
    )
    assert result.returncode == 0
    assert "0001:ab:cd" in result.stdout  # printed as text, not as a Rich emoji code
    assert "neg_xid043_kmsg_malformed.log:1" in result.stderr
    assert "1 events: 1 NONFATAL RESTART_APP" in result.stdout


def test_classify_with_policy_override(corpus: Path, tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("overrides:\n  32: {severity: FATAL, action: RESET_GPU, reason: test}\n")
    result = gpufleet(
        "xid", "classify", "-o", "json", "--policy", str(policy), str(corpus / "xid032_nvsentinel_csvtest.log")
    )
    assert result.returncode == 0
    assert json.loads(result.stdout)[0]["action"] == "RESET_GPU"


def test_classify_reads_stdin(corpus: Path) -> None:
    text = (corpus / "xid013_gpud_dmesg_iso.log").read_text()
    result = gpufleet("xid", "classify", "-o", "yaml", "-", input=text)
    assert result.returncode == 0 and "xid: 13" in result.stdout


def test_explain_shows_catalog_and_peers() -> None:
    result = gpufleet("xid", "explain", "109", "-o", "json")
    assert result.returncode == 0
    record = json.loads(result.stdout)
    assert record["mnemonic"] == "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR"
    assert record["peers"]["k8s-device-plugin"] == "ignored"
    assert record["gpufleet"]["action"] == "RESET_GPU" and record["gpufleet"]["rule"] == "override 109"
    nvl5 = json.loads(gpufleet("xid", "explain", "145", "-o", "json").stdout)
    assert any(row["unit"] == "RLW_RXPIPE" for row in nvl5["nvlink5_decode"])
    table = gpufleet("xid", "explain", "154")
    assert table.returncode == 0 and "Drain P2P" in table.stdout


def test_explain_spells_out_what_to_do() -> None:
    record = json.loads(gpufleet("xid", "explain", "48", "-o", "json").stdout)["gpufleet"]
    assert record["action"] == "WORKFLOW_XID_48" and record["action_reference"] == "NVIDIA WORKFLOW_XID_48, Xid 48"
    assert len(record["action_steps"]) >= 3
    shown = " ".join(gpufleet("xid", "explain", "48").stdout.split())
    assert f"What to do: {record['action_title']} (NVIDIA WORKFLOW_XID_48, Xid 48)" in shown
    assert all(f"{n}. {step[:30]}" in shown for n, step in enumerate(record["action_steps"], 1))


def test_explain_154_shows_each_recovery_states_severity_from_the_policy(tmp_path: Path) -> None:
    """Each state an Xid 154 can announce, with the severity and action the policy gives a line announcing it (a state
    that sets no severity takes the catalog's NONFATAL), and the reading of a state the policy does not know."""
    record = json.loads(gpufleet("xid", "explain", "154", "-o", "json").stdout)
    states = {state: (v["severity"], v["action"]) for state, v in record["recovery_actions"].items()}
    assert states == {
        "0x0": ("NONFATAL", "IGNORE"),
        "0x1": ("FATAL", "RESET_GPU"),
        "0x2": ("FATAL", "RESTART_BM"),
        "0x3": ("FATAL", "DRAIN_P2P"),
        "0x4": ("FATAL", "RESET_GPU"),
        "other": ("FATAL", "RESET_GPU"),
    }
    verdicts = {v.rule: (v.severity.value, v.action.value) for v in code_verdicts(154)}
    assert all(verdicts[f"xid154: announced {s}"] == said for s, said in states.items() if s != "other")
    site = tmp_path / "policy.yaml"
    site.write_text("recovery_actions:\n  3: {action: RESTART_APP, severity: NONFATAL}\n")
    mine = json.loads(gpufleet("xid", "explain", "154", "--policy", str(site), "-o", "json").stdout)
    assert (mine["recovery_actions"]["0x3"]["severity"], mine["recovery_actions"]["0x3"]["action"]) == (
        "NONFATAL",
        "RESTART_APP",
    )
    table = gpufleet("xid", "explain", "154").stdout
    assert "SEVERITY" in table and "DRAIN_P2P" in table


def test_policy_prints_the_default_document() -> None:
    result = gpufleet("xid", "policy")
    assert result.returncode == 0 and "recovery_actions:" in result.stdout


def test_bad_input_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    missing = gpufleet("xid", "classify", str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
    unknown = gpufleet("xid", "explain", "999")
    assert unknown.returncode == 2 and "not in the catalog" in unknown.stderr
    bad_policy = tmp_path / "p.yaml"
    bad_policy.write_text("overrides:\n  32: {severity: FATAL, action: NUKE}\n")
    result = gpufleet("xid", "classify", "--policy", str(bad_policy), str(tmp_path))
    assert result.returncode == 2 and "overrides.32.action" in result.stderr


def test_classify_binary_and_truncated_input(tmp_path: Path) -> None:
    blob = tmp_path / "kern.bin"
    blob.write_bytes(
        b"\x00\xff\xfe garbage\nNVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        b"GPU has fallen off the bus.\nNVRM: Xid (PCI:0000:3b:00): 4\xff3, pid=1, name=a, b\n"
        b"NVRM: Xid (PCI:0000:3b:00): 1"
    )
    result = gpufleet("xid", "classify", "-o", "json", str(blob))
    assert result.returncode == 0
    [record] = json.loads(result.stdout)
    assert record["xid"] == 79 and record["raw"].startswith("NVRM: Xid (PCI:0000:3b:00): 79")
    assert "kern.bin:3" in result.stderr and "kern.bin:4" in result.stderr


def test_classify_from_dmesg(corpus: Path, tmp_path: Path) -> None:
    fake = tmp_path / "dmesg"
    fake.write_text(f'#!/bin/sh\ncat "{corpus / "xid013_gpud_dmesg_iso.log"}"\n')
    fake.chmod(0o755)
    path = f"{tmp_path}{os.pathsep}{os.environ['PATH']}"
    result = gpufleet("xid", "classify", "--dmesg", "-o", "json", env={"PATH": path})
    assert result.returncode == 0, result.stderr
    [record] = json.loads(result.stdout)
    assert (record["file"], record["xid"], record["action"]) == ("dmesg", 13, "RESTART_APP")


def test_watch_once_prints_json_lines(corpus: Path, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text((corpus / "burst_xid79_sxid_gpud.log").read_text())
    result = gpufleet("xid", "watch", str(log), "--once", "--json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["kind"] for r in records[:2]] == ["xid", "fallen_off_bus"] and len(records) == 10
    text = gpufleet("xid", "watch", str(log), "--once")
    assert "0000:91:00 xid 79 FATAL RESTART_BM GPU has fallen off the bus." in text.stdout


def test_watch_once_on_a_missing_file_is_an_error(tmp_path: Path) -> None:
    result = gpufleet("xid", "watch", str(tmp_path / "nope.log"), "--once")
    assert result.returncode != 0 and "no such file" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero on this system")
def test_endless_devices_are_refused_not_followed() -> None:
    watch = gpufleet("xid", "watch", "/dev/zero", "--once")
    assert watch.returncode != 0 and "does not give kernel log records" in watch.stderr
    classify = gpufleet("xid", "classify", "/dev/zero")
    assert classify.returncode != 0 and "not a regular file" in classify.stderr


def test_a_yaml_bomb_policy_is_refused_quickly(tmp_path: Path) -> None:
    bomb = tmp_path / "policy.yaml"
    levels = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    bomb.write_text("\n".join(levels) + "\n")
    log = tmp_path / "kern.log"
    log.write_text("[  1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    result = gpufleet("xid", "classify", "--policy", str(bomb), str(log))
    assert result.returncode != 0 and "expands to more than" in result.stderr


def test_classify_reads_pasted_text(tmp_path: Path) -> None:
    line = "[  1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    pasted = f"$ dmesg | grep -i xid\n> {line}  <== here\n"
    result = gpufleet("xid", "classify", "-o", "json", "-", input=pasted)
    assert result.returncode == 0, result.stderr
    (record,) = json.loads(result.stdout)
    assert (record["xid"], record["pci"], record["line"]) == (79, "0000:3b:00", 2)
