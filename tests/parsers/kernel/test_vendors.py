"""amdgpu and habanalabs kernel-log reports: real captures (tests/captures/kmsg_amd, kmsg_gaudi; each with its
.source.txt) read into the events they stand for, boot chatter read into none, and the line forms the drivers print
(with and without socket/die, the running total, the RAS event number, the hlN device names)."""

from __future__ import annotations

import io
import json
import re

import pytest

from gpufleet.model.kernel import KernelEvent
from gpufleet.parsers.kernel.kmsg import KmsgParser, parse_kmsg, scan_kmsg
from gpufleet.parsers.kernel.stream import candidate_lines
from gpufleet.parsers.kernel.vendors import mca_severity
from tests.conftest import CAPTURES

DATA = CAPTURES


def capture(name: str) -> list[KernelEvent]:
    directory = "kmsg_gaudi" if name.startswith("setup_and_install") else "kmsg_amd"
    scan = scan_kmsg((DATA / directory / f"{name}.log").read_text(), year=2026)
    assert scan.rejected == []
    return scan.events


def summary(events: list[KernelEvent]) -> list[tuple[str, str | None, str | None]]:
    return [(e.kind, e.pci, e.detail) for e in events]


def test_every_capture_names_its_source() -> None:
    logs = sorted((DATA / "kmsg_amd").glob("*.log")) + sorted((DATA / "kmsg_gaudi").glob("*.log"))
    assert len(logs) >= 6
    for log in logs:
        source = log.with_suffix(".source.txt").read_text()
        # a public address (an issue thread, or a blog post that quotes the log) and the hardware it ran on
        assert re.search(r"https://[\w.-]+\.[a-z]{2,}/\S+", source) and "Hardware:" in source, log.name


def test_mi300x_fatal_ras_event_aca_banks_and_hive_reset() -> None:
    events = capture("rocm_4021_mi300x_athub_mode1")
    assert all(e.vendor == "amd" for e in events)
    fatal = events[0]
    assert (fatal.kind, fatal.pci, fatal.ras_block, fatal.ras_severity, fatal.detail) == (
        "ras", "0000:dd:00", "athub", "fatal", "ERREVENT_ATHUB_INTERRUPT",
    )  # fmt: skip
    assert fatal.message == "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!"  # {1} peeled off
    assert fatal.uptime_s == pytest.approx(76914.152141)
    banks = [e for e in events if e.kind == "hw_error"]
    # 0xbaa0...: valid, uncorrected, processor context corrupt; 0xd820...: valid, overflow, corrected
    assert [(b.pci, b.ras_severity) for b in banks] == [("0000:1b:00", "fatal")] + [("0000:9d:00", "correctable")] * 12
    [wafl] = [e for e in events if e.kind == "ras" and e.ras_severity == "correctable"]
    assert (wafl.pci, wafl.ras_block, wafl.error_count) == (
        "0000:9d:00",
        "xgmi_wafl",
        1533,
    )  # the total line is no event
    resets = [e for e in events if e.kind == "reset"]
    assert sorted({e.pci for e in resets if e.detail == "MODE1 reset"}) == [  # the whole hive
        "0000:1b:00", "0000:3d:00", "0000:4e:00", "0000:5f:00", "0000:9d:00", "0000:bd:00", "0000:cd:00", "0000:dd:00",
    ]  # fmt: skip
    # `[drm] VRAM is lost` names no device: it follows the resuming GPU's line
    assert summary(resets)[-2:] == [("reset", "0000:dd:00", "succeeded"), ("reset", "0000:dd:00", "VRAM lost")]


def test_older_kernels_fatal_event_without_event_number() -> None:
    [event] = capture("rocm_1386_mi50_athub")
    assert (event.kind, event.pci, event.ras_severity) == ("ras", "0000:83:00", "fatal")
    athub, begin = capture("rocm_1886_mi50_athub_reset")  # dmesg -T, with the inner `amdgpu: ` prefix
    assert (athub.detail, begin.detail, begin.pci) == ("ERREVENT_ATHUB_INTERRUPT", "reset begin", "0000:e3:00")
    assert athub.wall_time is not None and athub.wall_time.year == 2023


def test_ring_timeout_then_baco_reset_mainline_form() -> None:
    events = capture("cosmic_epoch_3764_rx5700xt_ring_timeout")
    assert summary(events) == [
        ("hang", "0000:28:00", "ring gfx_0.0.0"),
        ("reset", "0000:28:00", "reset begin"),
        ("reset", "0000:28:00", "BACO reset"),
        ("reset", "0000:28:00", "succeeded"),
        ("reset", "0000:28:00", "VRAM lost"),
    ]
    assert events[0].message == "ring gfx_0.0.0 timeout, signaled seq=57638, emitted seq=57641"


def test_drm_error_form_in_syslog() -> None:
    events = capture("cosmic_comp_2626_syslog_ring_timeout")
    hang = events[0]
    # the DRM_ERROR print names no device; the lines after it do
    assert (hang.kind, hang.pci, hang.host, hang.detail) == ("hang", None, "macross", "ring gfx_0.0.0")
    assert summary(events[1:]) == [
        ("reset", "0000:08:00", "reset begin"),
        ("reset", "0000:08:00", "BACO reset"),
        ("reset", "0000:08:00", "succeeded"),
        ("reset", "0000:08:00", "VRAM lost"),
        ("reset", "0000:08:00", "succeeded"),
    ]
    assert [e.line for e in capture("rocm_1724_navi21_syslog")] == [2, 4]  # fence and ring-test errors are no events


def test_mes_not_answering_is_a_hang() -> None:
    assert summary(capture("steamos_2802_navi33_mes")) == [
        ("hang", "0000:03:00", "ring gfx_0.0.0"),
        ("hang", "0000:03:00", "MES msg=RESET"),
        ("reset", "0000:03:00", "reset begin"),
        ("hang", "0000:03:00", "MES msg=REMOVE_QUEUE"),
    ]
    bare = capture("wayvr_650_mode1_vram_lost")  # messages quoted without any time stamp
    assert [e.detail for e in bare] == ["ring gfx_0.0.0", "MES msg=RESET", "reset begin", "MODE1 reset", "succeeded",
                                        "VRAM lost"]  # fmt: skip
    assert all(e.time is None and e.pci == "0000:2d:00" for e in bare)


def test_failed_resets_and_a_gpu_that_never_initialised() -> None:
    events = capture("rocm_2494_asic_reset_failed")
    failed = [(e.pci, e.message) for e in events if e.kind == "reset_failed"]
    assert failed == [
        ("0000:03:00", "GPU mode1 reset failed"),
        ("0000:83:00", "ASIC reset failed with error, -121 for drm dev, 0000:83:00.0"),
        ("0000:03:00", "ASIC reset failed with error, -121 for drm dev, 0000:03:00.0"),
        # the PSP failing the resume of the GPU whose reset went on to resume (device-less [drm:psp_...] lines)
        ("0000:03:00", "PSP create ring failed!"),
        ("0000:03:00", "PSP resume failed"),
        ("0000:03:00", "resume of IP block <psp> failed -62"),
        ("0000:03:00", "PSP create ring failed!"),
        ("0000:03:00", "PSP resume failed"),
    ]
    # each device-less `VRAM is lost` goes to the GPU whose resume it follows
    assert [(e.pci, e.detail) for e in events if e.kind == "reset"] == [
        ("0000:83:00", "succeeded"), ("0000:83:00", "VRAM lost"),
        ("0000:03:00", "succeeded"), ("0000:03:00", "VRAM lost"),
    ]  # fmt: skip
    assert summary(capture("rocm_3856_mi300x_init_failed")) == [
        ("reset_failed", "0000:05:00", "GPU init failed"),
        ("reset_failed", "0000:05:00", "GPU init failed (probe)"),  # `amdgpu: probe of 0000:05:00.0 failed ...`
    ]


def test_gaudi_devices_that_fail_to_initialise_are_tied_to_their_pci_address() -> None:
    events = capture("setup_and_install_1_gaudi_init_failed")
    assert [(e.kind, e.pci, e.vendor) for e in events] == [
        ("reset_failed", "0000:1a:00", "intel"), ("reset_failed", "0000:34:00", "intel"),
        ("reset_failed", "0000:33:00", "intel"),
    ]  # fmt: skip
    # the init-failure line named hl2's address: a later hl2 report carries it
    parser = KmsgParser()
    for line in (DATA / "kmsg_gaudi" / "setup_and_install_1_gaudi_init_failed.log").read_text().splitlines():
        parser.feed_line(line)
    [later] = parser.feed_line("[  900.000001] habanalabs hl2: Going to reset device")
    assert (later.kind, later.pci) == ("reset", "0000:1a:00")


@pytest.mark.parametrize("name", ["cosmic_comp_2684_navi10_boot", "lact_1180_boot"])
def test_boot_chatter_is_no_fault(name: str) -> None:
    assert capture(name) == []


@pytest.mark.parametrize(
    "message",
    [
        "amdgpu 0000:1c:00.0: amdgpu: RAS INFO: ras initialized successfully, hardware ability[7fff] ras_mask[7fff]",
        "[drm] Initialized amdgpu 3.57.0 20150101 for 0000:1c:00.0 on minor 1",
        "amdgpu 0000:1c:00.0: amdgpu: 0 uncorrectable hardware errors detected in umc block",
        "amdgpu 0000:1c:00.0: {1}socket: 0, die: 0, 3 uncorrectable hardware errors detected in total in umc block",
        "amdgpu 0000:1c:00.0: amdgpu: GPU reset end with ret = 0",
        "amdgpu 0000:1c:00.0: amdgpu: GPU mode1 reset",
        "amdgpu 0000:1c:00.0: amdgpu: Ring gfx_0.0.0 reset failed",  # the full reset after it reports the outcome
        "amdgpu 0000:1b:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0x0000000000000000",  # no valid error
        "habanalabs hl0: Found GAUDI2 device with 96GB DRAM",
        "habanalabs hl0: Successfully added device 0000:19:00.0 to habanalabs driver",
        "habanalabs hl1: Successfully loaded firmware to device",
    ],
)
def test_lines_that_report_no_fault(message: str) -> None:
    assert parse_kmsg(f"[   12.345678] {message}") == []


@pytest.mark.parametrize(
    ("message", "block", "severity", "count"),
    [
        ("2 uncorrectable hardware errors detected in umc block", "umc", "uncorrectable", 2),
        ("socket: 0, die: 1 5 correctable hardware errors detected in gfx block, no user action is needed.", "gfx",
         "correctable", 5),
        ("{7}socket: 2, die: 0, 1 new uncorrectable hardware errors detected in xgmi_wafl block", "xgmi_wafl",
         "uncorrectable", 1),
        ("{3} socket: 1, die: 3, 4 new deferred hardware errors detected in UMC block", "umc", "deferred", 4),
        ("{3} socket: 1, die: 3, 1 new poison consumption detected in gfx block", "gfx", "uncorrectable", 1),
        ("Poison is created, no user action is needed.", "umc", "deferred", 1),
        ("{12}GPU reset for sdma RAS poison consumption is issued!", "sdma", "uncorrectable", 1),
        ("{5} gfx RAS poison consumption is issued!", "gfx", "uncorrectable", 1),
    ],
)  # fmt: skip
def test_ras_count_forms(message: str, block: str, severity: str, count: int) -> None:
    [event] = parse_kmsg(f"amdgpu 0000:c1:00.0: amdgpu: {message}")
    assert (event.kind, event.pci, event.ras_block, event.ras_severity, event.error_count) == (
        "ras", "0000:c1:00", block, severity, count,
    )  # fmt: skip


def test_reset_and_failure_forms() -> None:
    lines = [
        "amdgpu 0000:15:00.0: amdgpu: device lost from bus!",
        "amdgpu 0000:15:00.0: amdgpu: GPU reset end with ret = -19",
        "amdgpu: GPU Recovery Failed: -19",
        "amdgpu 0000:15:00.0: GPU reset(3) failed with error -110 ",
        "amdgpu 0000:15:00.0: ring comp_1.1.0 timeout, but soft recovered",
        "amdgpu 0000:15:00.0: Ring comp_1.1.0 reset succeeded",
        "amdgpu 0000:15:00.0: amdgpu: RAS records:129 exceed threshold:128, GPU will not be initialized. Replace this "
        "GPU or increase the threshold",
    ]
    assert summary(parse_kmsg("\n".join(lines))) == [
        ("fallen_off_bus", "0000:15:00", "lost from bus"),
        ("reset_failed", "0000:15:00", "reset failed"),
        ("reset_failed", None, "reset failed"),
        ("reset_failed", "0000:15:00", "reset failed"),
        ("hang", "0000:15:00", "ring comp_1.1.0 soft recovered"),
        ("reset", "0000:15:00", "ring comp_1.1.0 reset succeeded"),
        ("hw_error", "0000:15:00", "bad page threshold 128"),
    ]


def test_habanalabs_reports_and_hl_names() -> None:
    lines = [
        "[  100.0] habanalabs hl3: Command submission 1187 has not finished in 30 seconds!",  # before hl3 is known
        "[  101.0] habanalabs hl3: Successfully added device 0000:4d:00.0 to habanalabs driver",
        "[  102.0] habanalabs hl3: Going to reset device",
        "[  103.0] habanalabs hl3: 0000:4d:00.0 device is not idle after reset (mask 0x1f)",
        "[  103.1] habanalabs hl3: 0000:4d:00.0 Failed to reset! Device is NOT usable",
        "[  104.0] habanalabs 0000:19:00.0: 0000:19:00.0 Consecutive fatal errors, stopping hard reset",
        "[  105.0] habanalabs hl5: Consecutive FW fatal errors received, stopping hard reset",
        "[  106.0] habanalabs 0000:19:00.0: Device heartbeat failed! PCI link is healthy",
        '[  107.0] habanalabs hl3: Received H/W interrupt 287 ["MMU_PAGE_FAULT"]',
        "[  107.1] habanalabs hl3: MMU page fault on va 0x7ff00000",
        "[  107.2] habanalabs hl3: RAZWI event caused by illegal write of TPC0",
        '[  108.0] habanalabs hl3: Received H/W interrupt 5 ["TPC0_DERR"]',
        "[  109.0] habanalabs 0000:19:00.0: HBM0_MC0_DERR: ECC error detected. address: 0x1000. Syndrom: 0x2. "
        "block id 3. critical 1.",
        "[  110.0] habanalabs: Failed to initialize accel2. Device 0000:9a:00.0 is NOT usable!",
        "[  111.0] habanalabs hl3: Successfully finished resetting the 0000:4d:00.0 device",
    ]
    events = parse_kmsg("\n".join(lines))
    assert all(e.vendor == "intel" for e in events)
    assert [(e.kind, e.pci, e.detail, e.ras_severity) for e in events] == [
        ("hang", None, "CS_TIMEOUT (hl3)", None),
        ("reset", "0000:4d:00", "DEVICE_RESET: reset begin", None),
        ("reset_failed", "0000:4d:00", "device is not idle after reset", None),
        ("reset_failed", "0000:4d:00", "device NOT usable after reset", None),
        ("reset_failed", "0000:19:00", "consecutive fatal errors", None),
        ("reset_failed", None, "consecutive fw fatal errors received (hl5)", None),
        ("hw_error", "0000:19:00", "CRITICL_FW_ERR: heartbeat failed", "fatal"),
        ("hw_error", "0000:4d:00", "MMU_PAGE_FAULT", None),
        ("hw_error", "0000:4d:00", "PAGE_FAULT", None),
        ("hw_error", "0000:4d:00", "RAZWI", None),
        ("hw_error", "0000:4d:00", "TPC0_DERR", "uncorrectable"),
        ("hw_error", "0000:19:00", "HBM0_MC0_DERR", "uncorrectable"),
        ("reset_failed", "0000:9a:00", "init failed: device NOT usable", None),
        ("reset", "0000:4d:00", "DEVICE_RESET: succeeded", None),
    ]


def test_mca_status_bits() -> None:
    assert mca_severity(0xBAA000000000080B) == "fatal"  # UC + PCC (ROCm #4021, 0000:1b:00.0)
    assert mca_severity(0xD820000000060150) == "correctable"  # ROCm #4021, 0000:9d:00.0
    assert mca_severity(0x98000800003E0000) == "deferred"  # poison bit 43 (ROCm #4021, a later comment)
    assert mca_severity(0xB000000000000000) == "uncorrectable"
    assert mca_severity(0x3000000000000000) is None  # not valid


def test_other_framings_carry_vendor_lines() -> None:
    entry = {"MESSAGE": "amdgpu 0000:1c:00.0: ring sdma0 timeout, signaled seq=16060, emitted seq=16062",
             "_HOSTNAME": "mi300-07", "__REALTIME_TIMESTAMP": "1760000000000000"}  # fmt: skip
    [hang] = parse_kmsg(json.dumps(entry))
    assert (hang.kind, hang.host, hang.detail, hang.pci) == ("hang", "mi300-07", "ring sdma0", "0000:1c:00")
    [record] = parse_kmsg("3,1234,76914152141,-;amdgpu 0000:1c:00.0: amdgpu: GPU reset(1) succeeded!")
    assert (record.kind, record.uptime_s) == ("reset", pytest.approx(76914.152141))


def test_streaming_reader_keeps_vendor_lines() -> None:
    text = "\n".join(["filler line"] * 50 + ["[ 5.0] habanalabs hl0: Going to reset device"] + ["filler"] * 50)
    picked = list(candidate_lines(io.BytesIO(text.encode())))
    assert (51, "[ 5.0] habanalabs hl0: Going to reset device") in picked
    assert all(number in range(51, 56) for number, _ in picked)  # the line and its context only


# older amdgpu wording for the same faults, each line as kernels printed it (amdgpu_job.c before 4.19: `last signaled
# seq`; mes_v11_0.c before 6.10: `MES failed to response msg=%d`; amdgpu_device.c `IP block:%s is hung!`, DRM_INFO
# on 4.x, dev_info later; amdgpu_psp.c psp_hw_start; the driver core's probe failure), lines quoted in ROCm/ROCm#2804,
# ValveSoftware/SteamOS#2802 and the amd-gfx list
@pytest.mark.parametrize(
    ("line", "kind", "pci", "detail"),
    [
        ("[14116.872461] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, last signaled seq=1653418, last "
         "emitted seq=1653420", "hang", None, "ring gfx"),
        ("[   48.337053] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout,", "hang", None, "ring gfx"),
        ("[283919.087877] [drm:mes_v11_0_submit_pkt_and_poll_completion.constprop.0 [amdgpu]] *ERROR* MES failed to "
         "response msg=14", "hang", None, "MES msg=14"),
        ("[  390.922077] amdgpu 0000:63:00.0: amdgpu: IP block:gfx_v11_0 is hung!", "hang", "0000:63:00",
         "IP block gfx_v11_0 hung"),
        ("[  101.000000] [drm] IP block:gmc_v8_0 is hung!", "hang", None, "IP block gmc_v8_0 hung"),
        ("[  548.007102] [drm:psp_hw_start [amdgpu]] *ERROR* PSP create ring failed!", "reset_failed", None,
         "PSP create ring failed"),
        ("[  548.027242] [drm:amdgpu_device_fw_loading [amdgpu]] *ERROR* hw_init of IP block <psp> failed -22",
         "reset_failed", None, "hw_init of IP block psp failed"),
        ("[  548.027306] amdgpu 0000:0a:00.0: amdgpu: amdgpu_device_ip_init failed", "reset_failed", "0000:0a:00",
         "GPU init failed"),
        ("[  548.100000] amdgpu: probe of 0000:0a:00.0 failed with error -22", "reset_failed", "0000:0a:00",
         "GPU init failed (probe)"),
        ("[   12.000000] amdgpu 0000:c5:00.0: probe with driver amdgpu failed with error -22", "reset_failed",
         "0000:c5:00", "GPU init failed (probe)"),
    ],
)  # fmt: skip
def test_older_wording_reads_as_the_newer(line: str, kind: str, pci: str | None, detail: str) -> None:
    [event] = parse_kmsg(line)
    assert (event.kind, event.pci, event.detail) == (kind, pci, detail)
