"""The kernel log's Xids as dcgm-exporter's series: counted per GPU within the window from when each line says it
was logged, joined to the frame's GPUs by PCI address (a GPU no entity is still counted, by its PCI address), the
last Xid per GPU, and what the collector reports while the log is unread or down."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from gpufleet.agent.collector import Collector, SourceDown
from gpufleet.agent.xids import LAST_XID, XidWindow, gpu_columns, nvml_bus_id
from gpufleet.model.kernel import KernelEvent
from gpufleet.parsers.kernel.kmsg import parse_kmsg
from gpufleet.telemetry.exposition.dcgm import Renderer
from gpufleet.telemetry.frame import DEFAULT_WINDOW_MS, GpuEntity, MetricFrame
from tests.conftest import CORPUS

H100 = "NVIDIA H100 80GB HBM3"
# the Xid 13/43 burst's lines carry ISO stamps: 2025-01-21T04:41:44.283302Z is the first
BURST = CORPUS / "burst_xid13_43_oom_gpud.log"
BURST_AT = 1737434504.283302
WINDOW_S = DEFAULT_WINDOW_MS / 1000


def gpu(index: int, bus: str, mig: int | None = None) -> GpuEntity:
    uuid = f"GPU-{index:08x}-0000-0000-0000-000000000000"
    if mig is None:
        return GpuEntity(gpu=index, uuid=uuid, model_name=H100, hostname="node-a", pci_bus_id=bus)
    return GpuEntity(index, uuid, H100, "node-a", bus, mig_profile="1g.10gb", gpu_instance_id=mig)


def frame(*entities: GpuEntity, at: float) -> MetricFrame:
    f = MetricFrame(entities or (gpu(0, "00000000:38:00.0"), gpu(1, "00000000:91:00.0")))
    f.timestamp = at
    return f


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def window(now: float, **kw: object) -> tuple[XidWindow, Clock]:
    clock = Clock(now)
    xids = XidWindow("node-a", clock=clock, **kw)  # type: ignore[arg-type]
    xids.status(True, "")
    return xids, clock


def collected(xids: XidWindow, f: MetricFrame) -> MetricFrame:
    f.clear_values()
    xids.fill(f, f.timestamp)
    return f


def xid_line(code: int, pci: str = "0000:91:00", stamp: str = "") -> str:
    return f"{stamp}NVRM: Xid (PCI:{pci}): {code}, pid=1234, name=python, Xid {code} here"


def events(text: str) -> list[KernelEvent]:
    return parse_kmsg(text)


# -- the window -----------------------------------------------------------------------------------------------------


def test_a_real_burst_is_counted_per_code_within_the_window_and_expires_after_it() -> None:
    xids, clock = window(BURST_AT + 20)
    xids.observe(events(BURST.read_text()))
    f = collected(xids, frame(at=clock.now))
    assert set(f.xid_counts) == {13, 43}
    assert list(f.xid_counts[13]) == [16.0, 0.0] and list(f.xid_counts[43]) == [1.0, 0.0]
    assert list(f.gpu(LAST_XID)) == [43.0, 0.0]  # the last Xid read on 0000:38:00; none on the other GPU
    # the last line was logged at BURST_AT + 0.003895: one window after it, nothing is left
    clock.now = BURST_AT + 0.003895 + WINDOW_S
    f = collected(xids, frame(at=clock.now))
    assert list(f.xid_counts[43]) == [1.0, 0.0] and 13 not in f.xid_counts  # the 13s were earlier: gone
    clock.now += 0.001
    f = collected(xids, frame(at=clock.now))
    assert f.xid_counts == {} and list(f.gpu(LAST_XID)) == [43.0, 0.0]  # the last Xid is not windowed


def test_a_line_logged_before_the_window_is_not_counted_but_is_the_last_xid() -> None:
    xids, clock = window(BURST_AT + WINDOW_S + 60)  # an agent reading an old log from its start
    xids.observe(events(BURST.read_text()))
    f = collected(xids, frame(at=clock.now))
    assert f.xid_counts == {} and list(f.gpu(LAST_XID)) == [43.0, 0.0]


def test_a_line_stamped_in_the_future_counts_from_now() -> None:
    xids, clock = window(BURST_AT - 3600)  # the host clock an hour behind the log's
    xids.observe(events(BURST.read_text()))
    clock.now += WINDOW_S - 1
    assert collected(xids, frame(at=clock.now)).xid_counts[13][0] == 16
    clock.now += 2
    assert collected(xids, frame(at=clock.now)).xid_counts == {}


def test_a_line_without_a_time_counts_from_when_it_was_read() -> None:
    xids, clock = window(1_000.0)
    xids.observe(events(xid_line(79)))  # no stamp at all
    clock.now = 1_000.0 + WINDOW_S
    assert collected(xids, frame(at=clock.now)).xid_counts[79][1] == 1
    clock.now += 0.5
    assert collected(xids, frame(at=clock.now)).xid_counts == {}


def test_kmsg_uptime_stamps_are_this_boots_but_a_files_may_be_anothers() -> None:
    line = xid_line(79, stamp="[  100.000000] ")  # logged 100 s after boot
    # /dev/kmsg: the host has been up 1000 s, so the line is 900 s old: out of the window
    kmsg, clock = window(50_000.0, boot_clock=lambda: 1_000.0)
    kmsg.observe(events(line))
    assert collected(kmsg, frame(at=clock.now)).xid_counts == {}
    # ... and up 200 s: the line is 100 s old, in the window until 200 s from now
    kmsg, clock = window(50_000.0, boot_clock=lambda: 200.0)
    kmsg.observe(events(line))
    clock.now += WINDOW_S - 100
    assert collected(kmsg, frame(at=clock.now)).xid_counts[79][1] == 1
    clock.now += 0.5
    assert collected(kmsg, frame(at=clock.now)).xid_counts == {}
    # a file: its uptime may be of an earlier boot, so the line counts from when it was read
    file, clock = window(50_000.0)
    file.observe(events(line))
    assert collected(file, frame(at=clock.now + WINDOW_S)).xid_counts[79][1] == 1


def test_the_frames_window_is_the_one_counted_and_labelled() -> None:
    xids, clock = window(10_000.0)
    xids.observe(events(xid_line(31)))
    f = frame(at=clock.now + 61)
    f.window_ms = 60_000  # dcgm-exporter --xid-count-window-size 60000
    assert collected(xids, f).xid_counts == {}
    xids.observe(events(xid_line(31)))
    f.timestamp = clock.now + 30
    assert collected(xids, f).xid_counts[31][1] == 1
    assert 'window_size_in_ms="60000",xid="31"} 1\n' in Renderer().render(f)


def test_other_kernel_reports_are_not_xids() -> None:
    xids, clock = window(1_000.0)
    burst = events((CORPUS / "burst_xid79_sxid_gpud.log").read_text())
    assert {e.kind for e in burst} >= {"xid", "fallen_off_bus", "sxid"}
    xids.observe(burst)
    f = collected(xids, frame(at=clock.now))
    assert set(f.xid_counts) == {79} and list(f.xid_counts[79]) == [0.0, 1.0]  # the one Xid line, on 0000:91:00


# -- joining a line to the frame's GPUs -------------------------------------------------------------------------------


def test_pci_addresses_join_in_any_spelling_and_a_mig_gpus_instances_share_its_xids() -> None:
    entities = (
        gpu(0, "00000000:3B:00.0"),  # NVML's spelling
        gpu(1, "0000:91:00.0", mig=7),  # sysfs's spelling, on a MIG GPU's two instances
        gpu(1, "0000:91:00.0", mig=8),
        GpuEntity(gpu=0, uuid="amd-0", model_name="MI300X", hostname="node-a", pci_bus_id="0000:3b:00.0", vendor="amd"),
        gpu(2, ""),  # no PCI address: nothing can be said of it
    )
    assert gpu_columns(MetricFrame(entities)) == {"0000:3b:00": [0], "0000:91:00": [1, 2]}
    xids, clock = window(1_000.0)
    xids.observe(
        events("\n".join([xid_line(48, "0000:3B:00"), xid_line(94, "0000:91:00"), xid_line(94, "0000:91:00")]))
    )
    f = collected(xids, frame(*entities, at=clock.now))
    assert list(f.xid_counts[48]) == [1, 0, 0, 0, 0] and list(f.xid_counts[94]) == [0, 2, 2, 0, 0]
    last = f.gpu(LAST_XID)
    assert list(last[:3]) == [48, 94, 94] and math.isnan(last[3]) and math.isnan(last[4])  # not NVIDIA's; no PCI


def test_an_xid_for_a_gpu_no_entity_is_is_counted_by_its_pci_address() -> None:
    xids, clock = window(1_000.0)
    xids.observe(events(xid_line(79, "0000:2a:00") + "\n" + xid_line(79, "0000:2a:00")))
    f = collected(xids, frame(at=clock.now))
    assert f.xid_counts == {} and f.unlisted_xid_counts == {("00000000:2A:00.0", "node-a", 79): 2.0}
    assert list(f.gpu(LAST_XID)) == [0.0, 0.0]  # the listed GPUs have none
    text = Renderer().render(f)
    labels = 'pci_bus_id="00000000:2A:00.0",hostname="node-a",window_size_in_ms="300000",xid="79"'
    assert f"DCGM_EXP_XID_ERRORS_COUNT{{{labels}}} 2\n" in text
    assert text.count("# TYPE DCGM_EXP_XID_ERRORS_COUNT") == 1
    clock.now += WINDOW_S + 1
    assert collected(xids, frame(at=clock.now)).unlisted_xid_counts == {}


def test_listed_and_unlisted_gpus_share_one_family() -> None:
    xids, clock = window(1_000.0)
    xids.observe(events(xid_line(79, "0000:91:00") + "\n" + xid_line(79, "0000:2a:00")))
    text = Renderer().render(collected(xids, frame(at=clock.now)))
    family = [ln for ln in text.splitlines() if "DCGM_EXP_XID_ERRORS_COUNT" in ln]
    assert [ln.split(" ")[:2] for ln in family[:2]] == [["#", "HELP"], ["#", "TYPE"]]  # one header, then both
    assert len(family) == 4 and 'gpu="1"' in family[2] and 'pci_bus_id="00000000:2A:00.0"' in family[3]


@pytest.mark.parametrize(("pci", "bus_id"), [("0000:3b:00", "00000000:3B:00.0"), ("0001:c1:1f", "00000001:C1:1F.0")])
def test_nvml_spelling_of_a_bus_id(pci: str, bus_id: str) -> None:
    assert nvml_bus_id(pci) == bus_id


# -- what /metrics and source_up say while the log is unread or down --------------------------------------------------


def test_nothing_is_filled_or_reported_before_the_log_was_read() -> None:
    clock = Clock(1_000.0)
    xids = XidWindow("node-a", clock=clock)
    f = frame(at=clock.now)
    with pytest.raises(SourceDown) as raised:
        xids.collect(f)
    assert raised.value.why is None
    assert np.isnan(f.gpu(LAST_XID)).all() and f.xid_counts == {}
    collector = Collector(f, [xids])
    collector.collect_once()
    assert "kmsg" not in collector.source_up and "DCGM_FI_DEV_XID_ERRORS" not in collector.body.decode()


def test_an_unreadable_log_never_read_fills_nothing_and_is_down() -> None:
    clock = Clock(1_000.0)
    xids = XidWindow("node-a", clock=clock)
    xids.status(False, "/var/log/kern.log does not exist yet")
    collector = Collector(frame(at=clock.now), [xids])
    collector.collect_once()
    body = collector.body.decode()
    assert collector.source_up == {"kmsg": False} and 'gpufleet_source_up{source="kmsg"} 0' in body
    assert "XID" not in body


def test_what_was_read_stays_while_the_log_is_down_and_source_up_says_so() -> None:
    xids, clock = window(time.time())  # the collector stamps its frames on the wall clock
    xids.observe(events(xid_line(79)))
    collector = Collector(frame(at=clock.now), [xids])
    collector.collect_once()
    assert collector.source_up == {"kmsg": True}
    xids.status(False, "cannot read /var/log/kern.log: Permission denied")  # rotated to a file it may not read
    collector.collect_once()
    body = collector.body.decode()
    assert collector.source_up == {"kmsg": False} and 'gpufleet_source_up{source="kmsg"} 0' in body
    assert 'xid="79"} 1' in body and 'DCGM_FI_DEV_XID_ERRORS{gpu="1"' in body


def test_the_source_says_which_fields_it_fills() -> None:
    from gpufleet.telemetry.fields import load_field_catalog

    catalog = load_field_catalog()
    assert XidWindow.fields == ("DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS")
    assert all(catalog.get(name).enabled for name in XidWindow.fields)


def test_a_sample_xid_79_renders_in_dcgm_exporters_series() -> None:
    """The lines the end-to-end test feeds a real agent, through the same window and renderer."""
    xids, clock = window(1_000.0)
    report = (CORPUS / "burst_xid79_sxid_gpud.log").read_text().splitlines()[:5]
    xids.observe(events("\n".join(report)))
    entities = (gpu(0, "00000000:8D:00.0"), gpu(1, "00000000:91:00.0"))
    text = Renderer().render(collected(xids, frame(*entities, at=clock.now)))
    uuid = "GPU-00000001-0000-0000-0000-000000000000"
    ident = f'gpu="1",UUID="{uuid}",pci_bus_id="00000000:91:00.0",device="nvidia1",modelName="{H100}",hostname="node-a"'
    assert f'DCGM_EXP_XID_ERRORS_COUNT{{{ident},window_size_in_ms="300000",xid="79"}} 1\n' in text
    assert f"DCGM_FI_DEV_XID_ERRORS{{{ident}}} 79\n" in text
    assert 'DCGM_FI_DEV_XID_ERRORS{gpu="0"' in text and 'xid="79"} 1\n' in text


# -- an agent without a control plane ---------------------------------------------------------------------------------


def test_an_agent_without_a_control_plane_follows_its_log_for_the_xids_from_its_end(tmp_path: Path) -> None:
    import httpx

    from gpufleet.agent.host import host_agent

    kern = tmp_path / "kern.log"
    kern.write_text(xid_line(79, "0000:3b:00", "[  10.000000] ") + "\n")  # before the agent: not counted
    agent = host_agent(
        host="127.0.0.1", port=0, interval=0.1, data_dir=tmp_path / "agent", control_plane=None,
        token=lambda: None, node="node-x", kmsg_file=kern, ib_sysfs=tmp_path / "no-ib", attribution=None,
    )  # fmt: skip
    agent.start()
    try:
        deadline = time.monotonic() + 10
        while agent.collector.source_up.get("kmsg") is not True and time.monotonic() < deadline:
            time.sleep(0.05)
        with kern.open("a") as fh:
            fh.write(xid_line(48, "0000:3b:00", "[  20.000000] ") + "\n")
        text = ""
        while 'xid="48"' not in text and time.monotonic() < deadline:
            time.sleep(0.05)
            text = httpx.get(f"http://127.0.0.1:{agent.port}/metrics").text
    finally:
        agent.stop()
    assert 'pci_bus_id="00000000:3B:00.0",hostname="node-x",window_size_in_ms="300000",xid="48"} 1\n' in text
    assert 'xid="79"' not in text and 'gpufleet_source_up{source="kmsg"} 1' in text
    assert agent.spool is None and not list(tmp_path.glob("agent/spool-*"))  # no spool: its position was in memory
