"""nvidia-smi -q text, -q -x XML and the plain table.

The corpus has no XML capture. `NVSMI_Q_01_AS_XML` is the corpus capture nvsmi_q_01 (nvidia-smi -q on an
A100-SXM4-80GB, driver 510.73.08) written out by hand in nvidia-smi's XML schema (nvsmi_device_v12.dtd element
names), value for value, so the XML parser is checked against the same facts as the text parser.
`FULL_TEXT`/`FULL_XML` cover the sections that capture elides (temperature, power, clocks, clock event
reasons, PCIe, MIG) with the same values in both formats, in the key and element names nvidia-smi 535+ prints.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.nvidia.smi import parse_query, parse_query_text, parse_query_xml
from gpufleet.parsers.nvidia.smi_table import parse_table
from gpufleet.parsers.nvidia.smi_values import unreadable

NVSMI_Q_01_AS_XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">
<nvidia_smi_log>
    <timestamp>Wed Jun  7 19:32:16 2023</timestamp>
    <driver_version>510.73.08</driver_version>
    <cuda_version>11.6</cuda_version>
    <attached_gpus>8</attached_gpus>
    <gpu id="00000000:10:1C.0">
        <product_name>NVIDIA A100-SXM4-80GB</product_name>
        <ecc_errors>
            <volatile>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>177</dram_correctable>
                <dram_uncorrectable>0</dram_uncorrectable>
            </volatile>
            <aggregate>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>177</dram_correctable>
                <dram_uncorrectable>0</dram_uncorrectable>
            </aggregate>
        </ecc_errors>
        <retired_pages>
            <multiple_single_bit_retirement>
                <retired_count>N/A</retired_count>
                <retired_pagelist>N/A</retired_pagelist>
            </multiple_single_bit_retirement>
            <double_bit_retirement>
                <retired_count>N/A</retired_count>
                <retired_pagelist>N/A</retired_pagelist>
            </double_bit_retirement>
            <pending_blacklist>N/A</pending_blacklist>
        </retired_pages>
        <remapped_rows>
            <remapped_row_corr>1</remapped_row_corr>
            <remapped_row_unc>0</remapped_row_unc>
            <remapped_row_pending>Yes</remapped_row_pending>
            <remapped_row_failure>No</remapped_row_failure>
            <row_remapper_histogram>
                <row_remapper_histogram_max>639 bank(s)</row_remapper_histogram_max>
                <row_remapper_histogram_high>1 bank(s)</row_remapper_histogram_high>
                <row_remapper_histogram_partial>0 bank(s)</row_remapper_histogram_partial>
                <row_remapper_histogram_low>0 bank(s)</row_remapper_histogram_low>
                <row_remapper_histogram_none>0 bank(s)</row_remapper_histogram_none>
            </row_remapper_histogram>
        </remapped_rows>
    </gpu>
</nvidia_smi_log>
"""

FULL_TEXT = """
==============NVSMI LOG==============

Timestamp                                 : Mon Jul 15 13:41:56 2024
Driver Version                            : 535.161.08
CUDA Version                              : 12.2

Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    MIG Mode
        Current                           : Disabled
        Pending                           : Enabled
    Serial Number                         : 1652923012345
    GPU UUID                              : GPU-0d4f6f4e-5a4e-8d21-6e0c-1a2b3c4d5e6f
    PCI
        Bus                               : 0x18
        Bus Id                            : 00000000:18:00.0
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : 4
            Link Width
                Max                       : 16x
                Current                   : 8x
        Replays Since Reset               : 3
        Replay Number Rollovers           : 0
    Fan Speed                             : N/A
    Performance State                     : P0
    Clocks Event Reasons
        Idle                              : Not Active
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : Active
        HW Slowdown                       : Active
            HW Thermal Slowdown           : Active
            HW Power Brake Slowdown       : Not Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : Not Active
        Display Clock Setting             : Not Active
    FB Memory Usage
        Total                             : 81559 MiB
        Used                              : 76000 MiB
    Utilization
        Gpu                               : 97 %
        Memory                            : 40 %
    ECC Mode
        Current                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 2
            SRAM Uncorrectable Parity     : 1
            SRAM Uncorrectable SEC-DED    : 1
            DRAM Correctable              : 10
            DRAM Uncorrectable            : 0
        Aggregate
            SRAM Correctable              : 4
            SRAM Uncorrectable Parity     : 3
            SRAM Uncorrectable SEC-DED    : 2
            DRAM Correctable              : 20
            DRAM Uncorrectable            : 1
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 2
        Pending                           : No
        Remapping Failure Occurred        : Yes
    Temperature
        GPU Current Temp                  : 81 C
        GPU T.Limit Temp                  : 6 C
        GPU Shutdown T.Limit Temp         : -8 C
        GPU Slowdown T.Limit Temp         : -2 C
        Memory Current Temp               : 77 C
    GPU Power Readings
        Power Draw                        : 699.13 W
        Current Power Limit               : 700.00 W
        Max Power Limit                   : 700.00 W
    Clocks
        Graphics                          : 1755 MHz
        SM                                : 1755 MHz
        Memory                            : 2619 MHz
        Video                             : 1545 MHz
    Max Clocks
        Graphics                          : 1980 MHz
        SM                                : 1980 MHz
        Memory                            : 2619 MHz
"""

FULL_XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <timestamp>Mon Jul 15 13:41:56 2024</timestamp>
  <driver_version>535.161.08</driver_version>
  <cuda_version>12.2</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:18:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <mig_mode><current_mig>Disabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>
    <serial>1652923012345</serial>
    <uuid>GPU-0d4f6f4e-5a4e-8d21-6e0c-1a2b3c4d5e6f</uuid>
    <pci>
      <pci_bus>18</pci_bus>
      <pci_bus_id>00000000:18:00.0</pci_bus_id>
      <pci_gpu_link_info>
        <pcie_gen><max_link_gen>5</max_link_gen><current_link_gen>4</current_link_gen></pcie_gen>
        <link_widths><max_link_width>16x</max_link_width><current_link_width>8x</current_link_width></link_widths>
      </pci_gpu_link_info>
      <replay_counter>3</replay_counter>
      <replay_rollover_counter>0</replay_rollover_counter>
    </pci>
    <fan_speed>N/A</fan_speed>
    <performance_state>P0</performance_state>
    <clocks_event_reasons>
      <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>
<clocks_event_reason_applications_clocks_setting>Not Active</clocks_event_reason_applications_clocks_setting>
      <clocks_event_reason_sw_power_cap>Active</clocks_event_reason_sw_power_cap>
      <clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>
      <clocks_event_reason_hw_thermal_slowdown>Active</clocks_event_reason_hw_thermal_slowdown>
      <clocks_event_reason_hw_power_brake_slowdown>Not Active</clocks_event_reason_hw_power_brake_slowdown>
      <clocks_event_reason_sync_boost>Not Active</clocks_event_reason_sync_boost>
      <clocks_event_reason_sw_thermal_slowdown>Not Active</clocks_event_reason_sw_thermal_slowdown>
      <clocks_event_reason_display_clocks_setting>Not Active</clocks_event_reason_display_clocks_setting>
    </clocks_event_reasons>
    <fb_memory_usage><total>81559 MiB</total><used>76000 MiB</used></fb_memory_usage>
    <utilization><gpu_util>97 %</gpu_util><memory_util>40 %</memory_util></utilization>
    <ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>
    <ecc_errors>
      <volatile>
        <sram_correctable>2</sram_correctable>
        <sram_uncorrectable_parity>1</sram_uncorrectable_parity>
        <sram_uncorrectable_secded>1</sram_uncorrectable_secded>
        <dram_correctable>10</dram_correctable>
        <dram_uncorrectable>0</dram_uncorrectable>
      </volatile>
      <aggregate>
        <sram_correctable>4</sram_correctable>
        <sram_uncorrectable_parity>3</sram_uncorrectable_parity>
        <sram_uncorrectable_secded>2</sram_uncorrectable_secded>
        <dram_correctable>20</dram_correctable>
        <dram_uncorrectable>1</dram_uncorrectable>
        <sram_threshold_exceeded>No</sram_threshold_exceeded>
      </aggregate>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement><retired_count>N/A</retired_count></multiple_single_bit_retirement>
      <double_bit_retirement><retired_count>N/A</retired_count></double_bit_retirement>
      <pending_blacklist>N/A</pending_blacklist>
      <pending_retirement>N/A</pending_retirement>
    </retired_pages>
    <remapped_rows>
      <remapped_row_corr>0</remapped_row_corr>
      <remapped_row_unc>2</remapped_row_unc>
      <remapped_row_pending>No</remapped_row_pending>
      <remapped_row_failure>Yes</remapped_row_failure>
    </remapped_rows>
    <temperature>
      <gpu_temp>81 C</gpu_temp>
      <gpu_temp_tlimit>6 C</gpu_temp_tlimit>
      <gpu_temp_max_tlimit_threshold>-8 C</gpu_temp_max_tlimit_threshold>
      <gpu_temp_slow_tlimit_threshold>-2 C</gpu_temp_slow_tlimit_threshold>
      <memory_temp>77 C</memory_temp>
    </temperature>
    <gpu_power_readings>
      <power_draw>699.13 W</power_draw>
      <current_power_limit>700.00 W</current_power_limit>
      <max_power_limit>700.00 W</max_power_limit>
    </gpu_power_readings>
    <clocks>
      <graphics_clock>1755 MHz</graphics_clock><sm_clock>1755 MHz</sm_clock>
      <mem_clock>2619 MHz</mem_clock><video_clock>1545 MHz</video_clock>
    </clocks>
    <max_clocks>
      <graphics_clock>1980 MHz</graphics_clock><sm_clock>1980 MHz</sm_clock><mem_clock>2619 MHz</mem_clock>
    </max_clocks>
  </gpu>
</nvidia_smi_log>
"""


def test_q01_row_remap_pending(corpus: Path) -> None:
    report = parse_query_text((corpus / "nvsmi_q_01_a100_ecc_rowremap_stas00.txt").read_text())
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == ("510.73.08", "11.6", 8)
    [gpu] = report.gpus  # the capture elides the other seven GPUs
    assert gpu.pci == "0000:10:1c" and gpu.product_name == "NVIDIA A100-SXM4-80GB"
    assert gpu.ecc_volatile.dram_correctable == 177 and gpu.ecc_aggregate.dram_uncorrectable == 0
    assert gpu.retired_sbe is None and gpu.retired_pending is None
    assert (gpu.remap_correctable, gpu.remap_uncorrectable, gpu.remap_pending, gpu.remap_failure) == (
        1,
        0,
        True,
        False,
    )
    assert gpu.remap_histogram == {"max": 639, "high": 1, "partial": 0, "low": 0, "none": 0}


def test_q01_xml_conversion_gives_the_same_record(corpus: Path) -> None:
    text = parse_query_text((corpus / "nvsmi_q_01_a100_ecc_rowremap_stas00.txt").read_text())
    xml = parse_query_xml(NVSMI_Q_01_AS_XML)
    assert asdict(xml.gpus[0]) == asdict(text.gpus[0])
    assert (xml.driver_version, xml.cuda_version, xml.timestamp, xml.attached_gpus) == (
        text.driver_version,
        text.cuda_version,
        text.timestamp,
        text.attached_gpus,
    )


def test_q02_section_excerpt_without_gpu_header(corpus: Path) -> None:
    [gpu] = parse_query_text((corpus / "nvsmi_q_02_sram_uncorrectable_stas00.txt").read_text()).gpus
    assert gpu.pci is None
    assert gpu.ecc_volatile.sram_uncorrectable == 1 and gpu.ecc_aggregate.sram_uncorrectable == 5


def test_q03_q04_retired_pages(corpus: Path) -> None:
    bad = parse_query_text((corpus / "nvsmi_q_03_retired_pages_bad_aznhc.txt").read_text())
    good = parse_query_text((corpus / "nvsmi_q_04_retired_pages_good_aznhc.txt").read_text())
    assert len(bad.gpus) == len(good.gpus) == 8 == bad.attached_gpus
    assert [g.pci for g in bad.gpus] == [f"000{i}:00:00" for i in range(1, 9)]
    assert [(g.retired_sbe, g.retired_dbe, g.retired_pending) for g in bad.gpus[:2]] == [
        (60, 5, False),
        (2, 61, True),
    ]
    assert sum(g.retired_dbe or 0 for g in bad.gpus) == 5 + 61 + 45 + 56
    assert all((g.retired_sbe, g.retired_dbe, g.retired_pending) == (0, 0, False) for g in good.gpus)
    assert good.driver_version == "535.86.10"


def test_full_text_and_xml_agree() -> None:
    text = parse_query_text(FULL_TEXT).gpus[0]
    xml = parse_query(FULL_XML).gpus[0]
    assert asdict(text) == asdict(xml)
    gpu = text
    assert gpu.uuid == "GPU-0d4f6f4e-5a4e-8d21-6e0c-1a2b3c4d5e6f" and gpu.serial == "1652923012345"
    assert (gpu.temp_c, gpu.memory_temp_c, gpu.temp_slowdown_tlimit_c) == (81, 77, -2)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (699.13, 700.0)
    assert (gpu.clock_sm_mhz, gpu.max_clock_sm_mhz, gpu.clock_memory_mhz) == (1755, 1980, 2619)
    assert gpu.active_clock_event_reasons == ["sw_power_cap", "hw_slowdown", "hw_thermal_slowdown"]
    assert gpu.ecc_volatile.sram_uncorrectable == 2 and gpu.ecc_aggregate.sram_uncorrectable == 5
    assert (gpu.remap_uncorrectable, gpu.remap_failure) == (2, True)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (
        4,
        5,
        8,
        16,
    )
    assert gpu.pcie_degraded is True and gpu.pcie_replay_counter == 3
    assert (gpu.mig_mode_current, gpu.mig_mode_pending) == ("Disabled", "Enabled")
    assert gpu.fan_speed_pct is None and gpu.gpu_util_pct == 97


def test_older_driver_names() -> None:
    old = (
        FULL_TEXT.replace("Clocks Event Reasons", "Clocks Throttle Reasons")
        .replace("GPU Power Readings", "Power Readings")
        .replace("Current Power Limit", "Power Limit")
    )
    gpu = parse_query_text(old).gpus[0]
    assert gpu.power_limit_w == 700.0 and gpu.clock_event_reasons["sw_power_cap"] is True
    old_xml = (
        FULL_XML.replace("clocks_event_reason", "clocks_throttle_reason")
        .replace("gpu_power_readings", "power_readings")
        .replace("current_power_limit", "power_limit")
    )
    assert asdict(parse_query_xml(old_xml).gpus[0]) == asdict(gpu)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (FULL_TEXT.replace("81 C", "hot C"), "GPU Current Temp"),
        (FULL_TEXT.replace("Pending                           : No", "Pending : Maybe"), "Pending"),
        ("garbage line\n", "not an nvidia-smi -q line"),
        ("", "no nvidia-smi -q content"),
    ],
)
def test_bad_text_names_the_field(text: str, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment):
        parse_query_text(text)


@pytest.mark.parametrize(
    ("xml", "fragment"),
    [
        ("<nvidia_smi_log><gpu>", "not well-formed"),
        ("<other/>", "root element"),
        (FULL_XML.replace("<gpu_temp>81 C", "<gpu_temp>x C"), "temperature/gpu_temp"),
    ],
)
def test_bad_xml_names_the_problem(xml: str, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment):
        parse_query_xml(xml)


def test_plain_table(corpus: Path) -> None:
    report = parse_table((corpus / "nvsmi_table_01_a100_stas00.txt").read_text())
    assert (report.driver_version, report.cuda_version) == ("550.90.12", "12.4")
    assert report.timestamp == "Tue Oct  8 09:49:34 2024"
    [gpu] = report.gpus
    assert (gpu.index, gpu.product_name, gpu.pci, gpu.persistence_mode) == (
        0,
        "NVIDIA A100 80GB PCIe",
        "0000:01:00",
        False,
    )
    assert (gpu.fan_speed_pct, gpu.temp_c, gpu.performance_state) == (None, 32, "P0")
    assert (gpu.power_draw_w, gpu.power_limit_w) == (69, 300)
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.gpu_util_pct) == (437, 81920, 100)
    assert (gpu.compute_mode, gpu.mig_mode_current, gpu.ecc_volatile_uncorrected_total) == (
        "Default",
        "Disabled",
        0,
    )


def test_plain_table_without_gpus_is_an_error() -> None:
    with pytest.raises(ParseError, match="no GPU rows"):
        parse_table("+-----+\n| nothing |\n")


VOLTA_TEXT = """GPU 00000000:1A:00.0
    Product Name                          : Tesla V100-SXM2-32GB
    ECC Errors
        Volatile
            Single Bit
                Device Memory             : 3
                Register File             : 0
                Total                     : 3
            Double Bit
                Device Memory             : 1
                Register File             : 0
                Total                     : 1
"""

VOLTA_XML = """<nvidia_smi_log><gpu id="00000000:1A:00.0"><product_name>Tesla V100-SXM2-32GB</product_name>
<ecc_errors><volatile>
<single_bit><device_memory>3</device_memory><register_file>0</register_file><total>3</total></single_bit>
<double_bit><device_memory>1</device_memory><register_file>0</register_file><total>1</total></double_bit>
</volatile></ecc_errors></gpu></nvidia_smi_log>"""


def test_volta_single_double_bit_ecc() -> None:
    gpu = parse_query_text(VOLTA_TEXT).gpus[0]
    assert (gpu.ecc_volatile.dram_correctable, gpu.ecc_volatile.dram_uncorrectable) == (3, 1)
    assert (gpu.ecc_volatile.sbe_total, gpu.ecc_volatile.dbe_total) == (3, 1)
    assert gpu.ecc_volatile.sram_uncorrectable is None
    assert asdict(parse_query_xml(VOLTA_XML).gpus[0]) == asdict(gpu)


def test_unreachable_gpu_and_failed_runs() -> None:
    text = FULL_TEXT.replace(
        "GPU 00000000:18:00.0\n",
        "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\nGPU 00000000:18:00.0\n",
    )
    report = parse_query_text(text)
    assert report.unreachable == {"0000:3b:00": "Unknown Error"} and len(report.gpus) == 1
    lost = parse_query_text(
        "Unable to determine the device handle for gpu 0000:91:00.0: GPU is lost.  "
        "Reboot the system to recover this GPU\n"
    )
    assert lost.gpus == [] and lost.unreachable["0000:91:00"].startswith("GPU is lost")
    failed = parse_query_text(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    assert failed.gpus == [] and failed.errors[0].startswith("NVIDIA-SMI has failed")


# -- values nvidia-smi could not read, ECC mode, excerpts and cuts ---------------------------------------------
@pytest.mark.parametrize(
    ("printed", "meaning"),
    [
        ("N/A", "not-available"),
        ("[N/A]", "not-available"),
        ("[Not Supported]", "not-available"),
        ("Not Supported", "not-available"),
        ("[Insufficient Permissions]", "not-available"),
        ("ERR!", "read-error"),
        ("[Unknown Error]", "read-error"),
        ("Unknown Error", "read-error"),
        ("[Timeout]", "read-error"),
        ("[Some Future NVML Error]", "read-error"),
        ("[GPU requires reset]", "reset-required"),
        ("[GPU is lost]", "gpu-lost"),
        ("81 C", None),
        ("Enabled", None),
        ("[...]", None),
    ],
)
def test_the_sentinel_vocabulary(printed: str, meaning: str | None) -> None:
    assert unreadable(printed) == meaning


def test_error_values_are_kept_with_their_lines_and_read_as_none() -> None:
    text = (
        FULL_TEXT.replace("81 C", "ERR!")
        .replace("699.13 W", "[GPU requires reset]")
        .replace(
            "Fan Speed                             : N/A", "Fan Speed                             : [Unknown Error]"
        )
    )
    gpu = parse_query_text(text).gpus[0]  # strict: these are nvidia-smi's own words, not bad input
    assert gpu.temp_c is None and gpu.power_draw_w is None and gpu.fan_speed_pct is None
    found = {v.name: (v.printed, v.kind, v.line) for v in gpu.unreadable}
    assert found["Temperature/GPU Current Temp"] == ("ERR!", "read-error", "GPU Current Temp                  : ERR!")
    assert found["GPU Power Readings/Power Draw"][1] == "reset-required"
    assert found["Fan Speed"][1] == "read-error"
    assert len(found) == 3  # N/A values are not faults


def test_xml_error_values_are_kept() -> None:
    gpu = parse_query_xml(FULL_XML.replace("<gpu_temp>81 C", "<gpu_temp>[GPU is lost]")).gpus[0]
    assert gpu.temp_c is None
    assert [(v.name, v.kind) for v in gpu.unreadable] == [("temperature/gpu_temp", "gpu-lost")]


@pytest.mark.parametrize(("current", "pending"), [("Disabled", "Disabled"), ("Off", "Off"), ("Disabled", "Enabled")])
def test_ecc_mode_off_parses(current: str, pending: str) -> None:
    text = FULL_TEXT.replace(
        "    ECC Mode\n        Current                           : Enabled\n",
        f"    ECC Mode\n        Current                           : {current}\n"
        f"        Pending                           : {pending}\n",
    )
    gpu = parse_query_text(text).gpus[0]
    assert gpu.ecc_mode_current is False and gpu.ecc_mode_pending is (pending == "Enabled")


def test_table_ecc_off_and_err_cells() -> None:
    data = Path(__file__).parents[2] / "triage" / "readers" / "data"
    off = parse_table((data / "nvsmi_table_a100_ecc_off.txt").read_text())
    assert [(g.ecc_mode_current, g.ecc_volatile_uncorrected_total) for g in off.gpus] == [(True, 0), (False, None)]
    err = parse_table((data / "nvsmi_table_a40_err.txt").read_text())
    lost = err.gpus[4]
    assert lost.product_name is None and lost.temp_c is None and lost.pci == "0000:81:00"
    assert [v.name for v in lost.unreadable] == [
        "Name", "Volatile Uncorr. ECC", "Fan", "Temp", "Perf", "Pwr:Usage", "Pwr:Cap", "GPU-Util", "MIG M.",
    ]  # fmt: skip
    assert all(not g.unreadable for g in err.gpus[:4]) and err.cut_short is None and err.partial is None


def test_table_with_a_redacted_bus_and_cut_inside_a_gpu() -> None:
    data = Path(__file__).parents[2] / "triage" / "readers" / "data"
    text = (data / "nvsmi_table_a100_ecc_off.txt").read_text().replace("00000000:0F:00.0", "        ...     ")
    report = parse_table(text)
    assert report.gpus[1].pci is None and report.gpus[1].pci_bus_id == "..."
    cut = parse_table(text[: text.index("| N/A   31C")])
    assert cut.cut_short == "the input ends inside GPU 1's rows"


def test_excerpt_starting_mid_record_places_keys_by_their_unique_tail() -> None:
    excerpt = (
        "            DRAM Uncorrectable            : 4\n"  # Volatile or Aggregate: not placed
        "        Aggregate\n"
        "            SRAM Uncorrectable            : 2\n"
        "            DRAM Uncorrectable            : 1\n"
        "    Remapped Rows\n"
        "        Pending                           : Yes\n"
        "        Remapping Failure Occurred        : No\n"
    )
    report = parse_query_text(excerpt)
    [gpu] = report.gpus
    assert gpu.ecc_aggregate.sram_uncorrectable == 2 and gpu.ecc_volatile.dram_uncorrectable is None
    assert gpu.remap_pending is True and report.cut_short is None


def test_redacted_and_dedented_gpu_sections() -> None:
    report = parse_query_text(
        "GPU 00000000:...\nRetired Pages\n    Double Bit ECC : 3\n    Pending Page Blacklist : No\n"
    )
    [gpu] = report.gpus
    assert gpu.pci_bus_id == "00000000:..." and gpu.pci is None and gpu.retired_dbe == 3


@pytest.mark.parametrize(
    ("cut_at", "why"),
    [
        ("            SRAM Uncorrectable Parity     : 3", "inside the 'ECC Errors' section"),
        ("        Single Bit ECC", "at the 'Retired Pages' heading"),
        ("        Remapping Failure Occurred", "inside the 'Remapped Rows' section"),
        ("            HW Power Brake Slowdown", "inside the 'Clocks Event Reasons' section"),
    ],
)
def test_a_record_cut_short_says_where(cut_at: str, why: str) -> None:
    report = parse_query_text(FULL_TEXT[: FULL_TEXT.index(cut_at)])
    assert report.cut_short is not None and why in report.cut_short


def test_fewer_gpus_than_attached_or_no_processes_entry_is_partial(corpus: Path) -> None:
    q01 = parse_query_text((corpus / "nvsmi_q_01_a100_ecc_rowremap_stas00.txt").read_text())
    assert q01.partial == "it shows 1 of the 8 attached GPUs" and q01.cut_short is None
    q03 = (corpus / "nvsmi_q_03_retired_pages_bad_aznhc.txt").read_text()
    two = parse_query_text(q03[: q03.index("GPU 00000002")] + "GPU 00000002:00:00.0\n")
    assert two.cut_short is not None and "header" in two.cut_short
    assert parse_query_text(FULL_TEXT).partial is not None  # a full -q's GPU ends with its Processes entry
    assert parse_query_text(FULL_TEXT + "    Processes                             : None\n").partial is None


def test_the_last_gpu_shorter_than_the_one_before_is_cut(corpus: Path) -> None:
    q04 = (corpus / "nvsmi_q_04_retired_pages_good_aznhc.txt").read_text()
    cut = parse_query_text(q04[: q04.rindex("        Double Bit ECC")])
    assert cut.cut_short is not None and parse_query_text(q04).cut_short is None


def test_lenient_parsing_notes_what_does_not_read() -> None:
    bad = FULL_TEXT.replace("81 C", "1e400 C").replace(
        "Replays Since Reset               : 3", "Replays : " + "9" * 5000
    )
    report = parse_query_text(bad + "stray prose at the margin\n", strict=False)
    assert report.gpus[0].temp_c is None and len(report.problems) == 2
    with pytest.raises(ParseError, match="GPU Current Temp"):
        parse_query_text(bad)
